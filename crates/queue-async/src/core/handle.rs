//! What [`WorkQueue`](crate::WorkQueue) and [`PriorityQueue`](crate::PriorityQueue) share as
//! handles: the common builder options and, through [`handle_methods!`], the methods that only
//! delegate to the core, written once with examples for each queue type.

use std::sync::Arc;

use ratelimit::RateLimiter;

use crate::metrics::MetricsProvider;

/// The builder options every queue has.
pub(crate) struct Options<K> {
    pub(crate) name: String,
    pub(crate) metrics: Option<Arc<dyn MetricsProvider>>,
    pub(crate) limiter: Option<Arc<dyn RateLimiter<K>>>,
}

impl<K> Default for Options<K> {
    fn default() -> Self {
        Self {
            name: String::new(),
            metrics: None,
            limiter: None,
        }
    }
}

/// The builder methods for [`Options`] (`$builder` has an `options` field).
macro_rules! builder_methods {
    () => {
        /// The queue's name: the `name` label of its metrics (metrics need a non-empty name).
        #[must_use]
        pub fn name(mut self, name: impl Into<String>) -> Self {
            self.options.name = name.into();
            self
        }

        /// Reports client-go's metrics through `provider` (with a non-empty [`name`](Self::name)).
        #[must_use]
        pub fn metrics(mut self, provider: Arc<dyn MetricsProvider>) -> Self {
            self.options.metrics = Some(provider);
            self
        }

        /// The limiter behind rate-limited adds; by default
        /// [`ratelimit::default_controller_rate_limiter`].
        #[must_use]
        pub fn rate_limiter(mut self, limiter: Arc<dyn RateLimiter<K>>) -> Self {
            self.options.limiter = Some(limiter);
            self
        }
    };
}

/// The handle methods that delegate to the core (`$queue` names the type in the examples).
macro_rules! handle_methods {
    ($queue:literal) => {
        /// Clears the rate limiter's history of `key` (call it when the key succeeded).
        ///
        /// # Examples
        ///
        #[doc = concat!("```\n# #[tokio::main(flavor = \"current_thread\", start_paused = true)]\n# async fn main() {\nlet queue = queue_async::", $queue, "::new();\nqueue.add_rate_limited(\"a\").unwrap();\nqueue.forget(&\"a\");\nassert_eq!(queue.num_requeues(&\"a\"), 0);\n# }\n```")]
        pub fn forget(&self, key: &K) {
            self.core.forget(key);
        }

        /// How many times the rate limiter has delayed `key` since it was last forgotten.
        ///
        /// # Examples
        ///
        #[doc = concat!("```\n# #[tokio::main(flavor = \"current_thread\", start_paused = true)]\n# async fn main() {\nlet queue = queue_async::", $queue, "::new();\nqueue.add_rate_limited(\"a\").unwrap();\nqueue.add_rate_limited(\"a\").unwrap();\nassert_eq!(queue.num_requeues(&\"a\"), 2);\n# }\n```")]
        pub fn num_requeues(&self, key: &K) -> usize {
            self.core.num_requeues(key)
        }

        /// Marks `key` done: for keys taken out of an item with
        /// [`Item::into_key`](crate::Item::into_key). If the key was added while it was
        /// processed, it is queued again now. A key that is not being processed is ignored.
        ///
        /// # Examples
        ///
        #[doc = concat!("```\n# #[tokio::main(flavor = \"current_thread\")]\n# async fn main() {\nlet queue = queue_async::", $queue, "::new();\nqueue.add(\"a\").unwrap();\nlet key = queue.get().await.unwrap().into_key();\nqueue.add(\"a\").unwrap(); // while processing: queued again at done\nassert_eq!(queue.len(), 0);\nqueue.done(&key);\nassert_eq!(queue.len(), 1);\n# }\n```")]
        pub fn done(&self, key: &K) {
            self.core.done(key);
        }

        /// Keys ready to be handed out: not those being processed or waiting for a delay.
        ///
        /// # Examples
        ///
        #[doc = concat!("```\nlet queue = queue_async::", $queue, "::new();\nqueue.add(\"a\").unwrap();\nqueue.add(\"a\").unwrap();\nassert_eq!(queue.len(), 1);\n```")]
        pub fn len(&self) -> usize {
            self.core.len()
        }

        /// Whether no key is ready.
        ///
        /// # Examples
        ///
        #[doc = concat!("```\nlet queue = queue_async::", $queue, "::<u32>::new();\nassert!(queue.is_empty());\n```")]
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// Keys waiting for their delay.
        ///
        /// # Examples
        ///
        #[doc = concat!("```\n# #[tokio::main(flavor = \"current_thread\", start_paused = true)]\n# async fn main() {\nlet queue = queue_async::", $queue, "::new();\nqueue.add_after(\"a\", std::time::Duration::from_secs(1)).unwrap();\nassert_eq!((queue.len(), queue.waiting_len()), (0, 1));\n# }\n```")]
        pub fn waiting_len(&self) -> usize {
            self.core.waiting_len()
        }

        /// Keys handed out and not yet done.
        ///
        /// # Examples
        ///
        #[doc = concat!("```\n# #[tokio::main(flavor = \"current_thread\")]\n# async fn main() {\nlet queue = queue_async::", $queue, "::new();\nqueue.add(\"a\").unwrap();\nlet item = queue.get().await.unwrap();\nassert_eq!(queue.processing_len(), 1);\nitem.done();\nassert_eq!(queue.processing_len(), 0);\n# }\n```")]
        pub fn processing_len(&self) -> usize {
            self.core.processing_len()
        }

        /// Stops the queue: adds are refused, keys waiting for a delay are dropped, `get` returns
        /// what is ready and then `None`. Cuts a running
        /// [`shut_down_with_drain`](Self::shut_down_with_drain) short. Idempotent.
        ///
        /// # Examples
        ///
        #[doc = concat!("```\n# #[tokio::main(flavor = \"current_thread\")]\n# async fn main() {\nlet queue = queue_async::", $queue, "::new();\nqueue.add(1).unwrap();\nqueue.shut_down();\nassert!(queue.get().await.is_some()); // ready before the shutdown\nassert!(queue.get().await.is_none());\n# }\n```")]
        pub fn shut_down(&self) {
            self.core.shut_down(false);
        }

        /// Shuts down like [`shut_down`](Self::shut_down), then waits until every ready key has
        /// been handed out and every handed-out key is done (client-go waits for in-flight keys
        /// only). A concurrent `shut_down` ends the wait early.
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: dropping the future stops waiting; the queue stays shut down.
        ///
        /// # Examples
        ///
        #[doc = concat!("```\n# #[tokio::main(flavor = \"current_thread\")]\n# async fn main() {\nlet queue = queue_async::", $queue, "::new();\nqueue.add(\"a\").unwrap();\nlet worker = queue.clone();\ntokio::spawn(async move { while let Some(item) = worker.get().await { item.done() } });\nqueue.shut_down_with_drain().await;\nassert!(queue.is_empty());\n# }\n```")]
        pub async fn shut_down_with_drain(&self) {
            self.core.shut_down(true);
            crate::core::wait_drained(&*self.core).await;
        }

        /// Whether [`shut_down`](Self::shut_down) or
        /// [`shut_down_with_drain`](Self::shut_down_with_drain) was called.
        ///
        /// # Examples
        ///
        #[doc = concat!("```\nlet queue = queue_async::", $queue, "::<u32>::new();\nqueue.shut_down();\nassert!(queue.is_shutting_down());\n```")]
        pub fn is_shutting_down(&self) -> bool {
            self.core.is_shutting_down()
        }

        /// Waits until the delay task has added every key whose delay is over at this instant,
        /// so that a test that advanced the paused clock sees them queued (client-go's "wait for
        /// the waiting loop" helper). Delayed adds set their timers at once, so nothing needs
        /// settling before an advance.
        ///
        /// # Examples
        ///
        #[doc = concat!("```\nuse std::time::Duration;\n# #[tokio::main(flavor = \"current_thread\", start_paused = true)]\n# async fn main() {\nlet queue = queue_async::", $queue, "::new();\nqueue.add_after(\"a\", Duration::from_millis(50)).unwrap();\nqueue.settle().await;\ntokio::time::advance(Duration::from_millis(50)).await;\nqueue.settle().await;\nassert_eq!(queue.len(), 1);\n# }\n```")]
        #[cfg(feature = "test-util")]
        #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
        pub async fn settle(&self) {
            if let Some(rx) = self.core.settle() {
                let _ = rx.await;
            }
        }
    };
}

pub(crate) use {builder_methods, handle_methods};
