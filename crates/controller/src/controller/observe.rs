//! What a controller reports: its events to hooks, its queue's metrics and its reconciles'.

use std::sync::Arc;

use ctrlq_queue_async::metrics::MetricsProvider;

use super::Controller;
use crate::Event;
use crate::key::Key;

impl<K: Key, E: Send + 'static> Controller<K, E> {
    /// Calls `hook` at every [`Event`] as it happens (terms, reconciles, drains), after the hooks
    /// added before it. A hook runs on the worker or the runner, so it must be quick and must not
    /// panic.
    ///
    /// # Examples
    ///
    /// ```
    /// # use ctrlq_controller::{Action, Context, Controller, Event};
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .on_event(|e| if let Event::LeadershipLost { aborted } = e { eprintln!("lost, {aborted} dropped") });
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn on_event<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Event<'_, K>) + Send + Sync + 'static,
    {
        self.hooks.push(Arc::new(hook));
        self
    }

    /// Reports the work queue's client-go metrics through `provider`, under the controller's
    /// name.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ctrlq_controller::{Action, Context, Controller};
    /// let provider = Arc::new(ctrlq_queue_async::metrics::NoopProvider);
    /// let c = Controller::new("pods", |_k: u32, _c: Context| async { Ok::<_, std::io::Error>(Action::Done) })
    ///     .queue_metrics(provider);
    /// # let _ = c;
    /// ```
    #[must_use]
    pub fn queue_metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
        self.settings.queue_metrics = Some(provider);
        self
    }

    /// Reports controller-runtime's reconcile metrics to `metrics` under the controller's name.
    ///
    /// See [`prometheus`](crate::prometheus) for an example.
    #[cfg(feature = "prometheus")]
    #[cfg_attr(docsrs, doc(cfg(feature = "prometheus")))]
    #[must_use]
    pub fn metrics(mut self, metrics: Arc<crate::prometheus::ControllerMetrics>) -> Self {
        self.telemetry.prometheus = Some(metrics);
        self
    }
}
