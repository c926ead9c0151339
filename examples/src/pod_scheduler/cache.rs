//! [`Cache`]: the scheduler's view of the nodes and of what is bound to each, with the pods it
//! bound itself counted before the watch confirms them (kube-scheduler's "assume").

use std::collections::{HashMap, HashSet};

use super::resources::{Lack, Resources};

/// The nodes, what each offers, and the pods bound to them with what they request.
///
/// A pod the scheduler binds is *assumed* at once: counted on its node before the bind is
/// even sent, so the next cycle sees the capacity it takes. The watch of bound pods later
/// confirms it; a bind that fails forgets it. Pods are keyed `namespace/name`.
///
/// # Examples
///
/// ```
/// use examples::pod_scheduler::{Cache, Resources};
///
/// let mut cache = Cache::default();
/// cache.set_node("n1", Resources::new(1_000, 1 << 30));
/// cache.assume("ns/a", "n1", Resources::new(600, 0));
/// assert_eq!(cache.free("n1"), Some(Resources::new(400, 1 << 30)));
/// cache.forget("ns/a"); // the bind failed
/// assert_eq!(cache.free("n1"), Some(Resources::new(1_000, 1 << 30)));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Cache {
    /// Node name to what it offers.
    nodes: HashMap<String, Resources>,
    /// Node name to what the pods bound there request; kept apart from `nodes`, so a pod seen
    /// before its node counts once the node comes.
    used: HashMap<String, Resources>,
    /// Pod key to its node, its requests, and whether it is only assumed.
    pods: HashMap<String, BoundPod>,
}

/// A pod the cache counts on a node.
#[derive(Debug, Clone)]
struct BoundPod {
    node: String,
    requests: Resources,
    assumed: bool,
}

/// Why a pod fits on no node: how many nodes there are, and how many lacked each resource,
/// written as kube-scheduler writes its `PodScheduled` message.
///
/// # Examples
///
/// ```
/// use examples::pod_scheduler::Unfit;
///
/// let unfit = Unfit { nodes: 3, cpu: 1, memory: 2 };
/// assert_eq!(unfit.to_string(), "0/3 nodes are available: 1 Insufficient cpu, 2 Insufficient memory.");
/// assert_eq!(Unfit::default().to_string(), "no nodes available to schedule pods");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unfit {
    /// The nodes tried.
    pub nodes: usize,
    /// How many lacked CPU.
    pub cpu: usize,
    /// How many lacked memory.
    pub memory: usize,
}

// ===== impl Cache =====

impl Cache {
    /// Adds or updates node `name`; returns what it offered before, if it was known.
    pub fn set_node(&mut self, name: &str, allocatable: Resources) -> Option<Resources> {
        self.nodes.insert(name.to_owned(), allocatable)
    }

    /// Removes node `name` (its pods stay counted until their own deletes come).
    pub fn remove_node(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// The node names, for a relist to drop the ones that are gone.
    pub fn node_names(&self) -> HashSet<String> {
        self.nodes.keys().cloned().collect()
    }

    /// How many nodes there are.
    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// What node `name` has left: its allocatable minus what its pods request (`None` for an
    /// unknown node).
    pub fn free(&self, name: &str) -> Option<Resources> {
        let allocatable = *self.nodes.get(name)?;
        Some(allocatable - self.used.get(name).copied().unwrap_or_default())
    }

    /// Counts pod `key` on `node` before its bind is confirmed.
    pub fn assume(&mut self, key: &str, node: &str, requests: Resources) {
        self.put(key, node, requests, true);
    }

    /// Forgets an assumed pod whose bind failed; a confirmed one stays.
    pub fn forget(&mut self, key: &str) {
        if self.pods.get(key).is_some_and(|p| p.assumed) {
            self.remove_pod(key);
        }
    }

    /// Records pod `key` as bound to `node` (the watch of bound pods saw it).
    pub fn confirm(&mut self, key: &str, node: &str, requests: Resources) {
        self.put(key, node, requests, false);
    }

    /// Removes pod `key` (deleted, or terminated); returns its node and what it freed there.
    pub fn remove_pod(&mut self, key: &str) -> Option<(String, Resources)> {
        let pod = self.pods.remove(key)?;
        if let Some(used) = self.used.get_mut(&pod.node) {
            *used = *used - pod.requests;
        }
        Some((pod.node, pod.requests))
    }

    /// Whether pod `key` is bound or assumed: a cycle skips it.
    pub fn has_pod(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    /// The confirmed pods not in `seen`: after a relist, those that went while the watch was
    /// down. Assumed pods stay (their binds may not be visible yet).
    pub fn confirmed_pods_not_in(&self, seen: &HashSet<String>) -> Vec<String> {
        let gone = self
            .pods
            .iter()
            .filter(|(k, p)| !p.assumed && !seen.contains(*k));
        gone.map(|(k, _)| k.clone()).collect()
    }

    /// The best node for `requests`: every node with room for it, scored by least allocated
    /// (the mean over CPU and memory of the share left free after placing it, as
    /// kube-scheduler's `NodeResourcesFit` scores by default), the highest score winning and
    /// the first name among equal scores.
    ///
    /// # Errors
    ///
    /// [`Unfit`] when no node has room.
    pub fn pick(&self, requests: &Resources) -> Result<String, Unfit> {
        let mut unfit = Unfit {
            nodes: self.nodes.len(),
            ..Unfit::default()
        };
        let mut best: Option<(i64, &String)> = None;
        for (name, allocatable) in &self.nodes {
            let free = *allocatable - self.used.get(name).copied().unwrap_or_default();
            let lack: Lack = requests.lack_in(&free);
            if lack.any() {
                unfit.cpu += usize::from(lack.cpu);
                unfit.memory += usize::from(lack.memory);
                continue;
            }
            let score = least_allocated(allocatable, &(free - *requests));
            let better = best.is_none_or(|(s, n)| score > s || score == s && name < n);
            if better {
                best = Some((score, name));
            }
        }
        best.map(|(_, name)| name.clone()).ok_or(unfit)
    }

    /// What each node offers and what is counted on it, by node name (for checks and logs).
    pub fn usage(&self) -> Vec<(String, Resources, Resources)> {
        let mut rows: Vec<_> = (self.nodes.iter())
            .map(|(n, a)| (n.clone(), *a, self.used.get(n).copied().unwrap_or_default()))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }

    fn put(&mut self, key: &str, node: &str, requests: Resources, assumed: bool) {
        self.remove_pod(key);
        let used = self.used.entry(node.to_owned()).or_default();
        *used = *used + requests;
        let pod = BoundPod {
            node: node.to_owned(),
            requests,
            assumed,
        };
        self.pods.insert(key.to_owned(), pod);
    }
}

/// The share of each resource left free, in hundredths, averaged over CPU and memory; a
/// resource the node does not offer counts as fully used.
fn least_allocated(allocatable: &Resources, left: &Resources) -> i64 {
    let share = |left: i64, all: i64| {
        if all <= 0 {
            0
        } else {
            i64::try_from(i128::from(left) * 100 / i128::from(all)).unwrap_or(0)
        }
    };
    let cpu = share(left.cpu_millis, allocatable.cpu_millis);
    let memory = share(left.memory_bytes, allocatable.memory_bytes);
    (cpu + memory) / 2
}

// ===== impl Unfit =====

impl std::fmt::Display for Unfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.nodes == 0 {
            return f.write_str("no nodes available to schedule pods");
        }
        write!(f, "0/{} nodes are available:", self.nodes)?;
        let reasons = [(self.cpu, "cpu"), (self.memory, "memory")];
        let mut sep = " ";
        for (count, resource) in reasons.into_iter().filter(|(c, _)| *c > 0) {
            write!(f, "{sep}{count} Insufficient {resource}")?;
            sep = ", ";
        }
        f.write_str(".")
    }
}

impl Unfit {
    /// Which resources were lacking on at least one node.
    pub fn lack(&self) -> Lack {
        Lack {
            cpu: self.cpu > 0,
            memory: self.memory > 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_prefers_the_least_allocated_node_and_reports_what_lacked() {
        let mut cache = Cache::default();
        cache.set_node("a", Resources::new(2_000, 4 << 30));
        cache.set_node("b", Resources::new(2_000, 4 << 30));
        cache.confirm("ns/x", "a", Resources::new(1_000, 0));
        assert_eq!(cache.pick(&Resources::new(500, 1 << 30)), Ok("b".into()));
        let unfit = cache.pick(&Resources::new(1_500, 5 << 30)).unwrap_err();
        assert_eq!(
            unfit,
            Unfit {
                nodes: 2,
                cpu: 1,
                memory: 2
            }
        );
        assert_eq!(
            unfit.lack(),
            Lack {
                cpu: true,
                memory: true
            }
        );
    }

    #[test]
    fn a_pod_seen_before_its_node_counts_once_the_node_comes() {
        let mut cache = Cache::default();
        cache.confirm("ns/x", "late", Resources::new(300, 0));
        cache.set_node("late", Resources::new(1_000, 0));
        assert_eq!(cache.free("late"), Some(Resources::new(700, 0)));
        cache.confirm("ns/x", "late", Resources::new(300, 0)); // the watch again: counted once
        assert_eq!(cache.free("late"), Some(Resources::new(700, 0)));
        assert_eq!(
            cache.remove_pod("ns/x"),
            Some(("late".into(), Resources::new(300, 0)))
        );
        assert_eq!(cache.free("late"), Some(Resources::new(1_000, 0)));
    }
}
