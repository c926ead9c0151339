//! Pure data structures behind the queues: no async, no clock reads.
