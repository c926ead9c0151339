//! Placeholder: filled in with the queue-core tour.
fn main() {}
