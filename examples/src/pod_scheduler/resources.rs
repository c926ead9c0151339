//! [`Resources`]: the CPU and memory a pod requests or a node offers, read from Kubernetes
//! quantities, and [`PodInfo`], what the queue holds of a pod.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Add, Sub};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

use ctrlq_queue_async::scheduling::Priority;

/// CPU in millicores and memory in bytes: what a pod requests, a node offers or a node has
/// left.
///
/// # Examples
///
/// ```
/// use examples::pod_scheduler::Resources;
///
/// let node = Resources::new(4_000, 8 << 30);
/// let pod = Resources::new(500, 1 << 30);
/// assert!(pod.fits_in(&node));
/// assert_eq!(node - pod, Resources::new(3_500, 7 << 30));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU in millicores (`1` is `1000`, `250m` is `250`).
    pub cpu_millis: i64,
    /// Memory in bytes.
    pub memory_bytes: i64,
}

/// Which resources a pod lacked on a node, or on every node it was tried on.
///
/// # Examples
///
/// ```
/// use examples::pod_scheduler::{Lack, Resources};
///
/// let lack = Lack::of(&Resources::new(2_000, 1), &Resources::new(1_000, 1));
/// assert_eq!(lack, Lack { cpu: true, memory: false });
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lack {
    /// Not enough CPU.
    pub cpu: bool,
    /// Not enough memory.
    pub memory: bool,
}

/// A quantity this scheduler cannot read (the API server validates quantities, so one it
/// accepted fails here only when it is beyond an `i64` of millicores or bytes).
///
/// # Examples
///
/// ```
/// use examples::pod_scheduler::parse_quantity_millis;
///
/// let err = parse_quantity_millis("twelve").unwrap_err();
/// assert_eq!(err.to_string(), "quantity \"twelve\" cannot be read");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("quantity {0:?} cannot be read")]
pub struct QuantityError(pub String);

/// What the scheduling queue holds of a pod: its name, what it requests, its priority and
/// whether a scheduling gate holds it.
///
/// # Examples
///
/// ```
/// use examples::pod_scheduler::{PodInfo, Resources};
/// use k8s_openapi::api::core::v1::Pod;
///
/// let pod: Pod = serde_json::from_value(serde_json::json!({
///     "metadata": { "namespace": "ns", "name": "p" },
///     "spec": { "containers": [
///         { "name": "a", "resources": { "requests": { "cpu": "250m", "memory": "64Mi" } } },
///         { "name": "b", "resources": { "requests": { "cpu": "1" } } },
///     ] },
/// })).unwrap();
/// let info = PodInfo::from_pod(&pod).unwrap();
/// assert_eq!(info.key(), "ns/p");
/// assert_eq!(info.requests, Resources::new(1_250, 64 << 20));
/// assert!(!info.gated);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodInfo {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's uid, which the binding names so that it cannot bind a pod recreated under
    /// the same name.
    pub uid: Option<String>,
    /// What it requests: the sum over its containers, or the largest init container if that
    /// is more, plus its overhead (kube-scheduler's `NodeResourcesFit` sum).
    pub requests: Resources,
    /// `spec.priority`; higher pops first.
    pub priority: i64,
    /// Whether `spec.schedulingGates` is non-empty.
    pub gated: bool,
}

// ===== impl Resources =====

impl Resources {
    /// `cpu_millis` millicores and `memory_bytes` bytes.
    pub const fn new(cpu_millis: i64, memory_bytes: i64) -> Self {
        Resources {
            cpu_millis,
            memory_bytes,
        }
    }

    /// Reads `cpu` and `memory` from a resource list (`requests`, `allocatable`); other
    /// resources are ignored, missing ones are zero.
    ///
    /// # Errors
    ///
    /// [`QuantityError`] when a quantity cannot be read.
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Result<Self, QuantityError> {
        let Some(list) = list else {
            return Ok(Resources::default());
        };
        let cpu = list.get("cpu").map(|q| parse_quantity_millis(&q.0));
        let memory = list.get("memory").map(|q| parse_quantity_millis(&q.0));
        Ok(Resources {
            cpu_millis: cpu.transpose()?.unwrap_or(0),
            // Milli-bytes round up to whole bytes, as the API server's `Value()` does.
            memory_bytes: memory
                .transpose()?
                .map_or(0, |m| m.div_euclid(1000) + i64::from(m % 1000 != 0)),
        })
    }

    /// What `node` offers: `status.allocatable`, or `status.capacity` where it has none.
    ///
    /// # Errors
    ///
    /// [`QuantityError`] when a quantity cannot be read.
    pub fn allocatable(node: &Node) -> Result<Self, QuantityError> {
        let status = node.status.as_ref();
        let list = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
        Self::from_list(list)
    }

    /// Whether `self` fits in `room`, resource by resource.
    pub fn fits_in(&self, room: &Resources) -> bool {
        self.lack_in(room) == Lack::default()
    }

    /// Which resources `room` lacks for `self`.
    pub fn lack_in(&self, room: &Resources) -> Lack {
        Lack::of(self, room)
    }

    /// The larger of each resource.
    #[must_use]
    pub fn max(self, other: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
        }
    }
}

impl Add for Resources {
    type Output = Resources;
    fn add(self, rhs: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_add(rhs.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(rhs.memory_bytes),
        }
    }
}

impl Sub for Resources {
    type Output = Resources;
    fn sub(self, rhs: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_sub(rhs.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(rhs.memory_bytes),
        }
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu={}m memory={}", self.cpu_millis, self.memory_bytes)
    }
}

// ===== impl Lack =====

impl Lack {
    /// Which resources `room` lacks for `need`.
    pub fn of(need: &Resources, room: &Resources) -> Lack {
        Lack {
            cpu: need.cpu_millis > room.cpu_millis,
            memory: need.memory_bytes > room.memory_bytes,
        }
    }

    /// Whether anything is lacking.
    pub fn any(&self) -> bool {
        self.cpu || self.memory
    }
}

// ===== impl PodInfo =====

impl PodInfo {
    /// Reads what the scheduler needs of `pod`.
    ///
    /// # Errors
    ///
    /// [`QuantityError`] when a request or overhead cannot be read.
    pub fn from_pod(pod: &Pod) -> Result<Self, QuantityError> {
        let spec = pod.spec.as_ref();
        let requests_of = |c: &k8s_openapi::api::core::v1::Container| {
            Resources::from_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()))
        };
        let mut sum = Resources::default();
        for c in spec.map(|s| &s.containers[..]).unwrap_or_default() {
            sum = sum + requests_of(c)?;
        }
        for c in spec
            .and_then(|s| s.init_containers.as_deref())
            .unwrap_or_default()
        {
            sum = sum.max(requests_of(c)?);
        }
        let overhead = Resources::from_list(spec.and_then(|s| s.overhead.as_ref()))?;
        Ok(PodInfo {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            uid: pod.uid(),
            requests: sum + overhead,
            priority: spec.and_then(|s| s.priority).map_or(0, i64::from),
            gated: spec
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| !g.is_empty()),
        })
    }

    /// `namespace/name`, the queue's key.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl Priority for PodInfo {
    fn priority(&self) -> i64 {
        self.priority
    }
}

// ===== quantities =====

/// Reads a Kubernetes quantity (`"250m"`, `"1.5"`, `"64Mi"`, `"1G"`, `"2e3"`) in thousandths
/// of its unit, rounded up: millicores for CPU, milli-bytes for memory.
///
/// # Errors
///
/// [`QuantityError`] when `text` is not a non-negative quantity, or its thousandths exceed an
/// `i64`.
///
/// # Examples
///
/// ```
/// use examples::pod_scheduler::parse_quantity_millis;
///
/// assert_eq!(parse_quantity_millis("250m"), Ok(250));
/// assert_eq!(parse_quantity_millis("1.5"), Ok(1_500));
/// assert_eq!(parse_quantity_millis("1Ki"), Ok(1_024_000));
/// assert_eq!(parse_quantity_millis("2e3"), Ok(2_000_000));
/// ```
pub fn parse_quantity_millis(text: &str) -> Result<i64, QuantityError> {
    let bad = || QuantityError(text.to_owned());
    let text = text.trim();
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let number = number.strip_prefix('+').unwrap_or(number);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_ok = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !digits_ok(whole) || !digits_ok(fraction) {
        return Err(bad());
    }
    // value = mantissa / 10^scale × 10^exp10 × 2^exp2, in thousandths.
    let digits = format!("{whole}{fraction}");
    let mantissa: i128 = digits.parse().map_err(|_| bad())?;
    let scale = i32::try_from(fraction.len()).map_err(|_| bad())?;
    let (exp10, exp2) = suffix_exponents(suffix).ok_or_else(bad)?;
    let mut numerator = mantissa.checked_mul(1000).ok_or_else(bad)?;
    numerator = numerator
        .checked_mul(1i128.checked_shl(exp2).ok_or_else(bad)?)
        .ok_or_else(bad)?;
    let mut denominator: i128 = 1;
    let exp = exp10 - scale;
    let power = 10i128.checked_pow(exp.unsigned_abs()).ok_or_else(bad)?;
    if exp >= 0 {
        numerator = numerator.checked_mul(power).ok_or_else(bad)?;
    } else {
        denominator = power;
    }
    let millis = numerator / denominator + i128::from(numerator % denominator != 0);
    i64::try_from(millis).map_err(|_| bad())
}

/// The decimal and binary exponents of a quantity's suffix.
fn suffix_exponents(suffix: &str) -> Option<(i32, u32)> {
    let binary = |n: u32| Some((0, 10 * n));
    match suffix {
        "" => Some((0, 0)),
        "m" => Some((-3, 0)),
        "k" => Some((3, 0)),
        "M" => Some((6, 0)),
        "G" => Some((9, 0)),
        "T" => Some((12, 0)),
        "P" => Some((15, 0)),
        "E" => Some((18, 0)),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        _ => {
            let exp = suffix.strip_prefix(['e', 'E'])?;
            let exp: i32 = exp.parse().ok()?;
            (exp.abs() <= 30).then_some((exp, 0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_the_api_server_writes_them() {
        let cases = [
            ("1", 1_000),
            ("0.1", 100),
            ("100m", 100),
            ("1.0001", 1_001),
            ("128Mi", (128i64 << 20) * 1000),
            ("1Gi", (1i64 << 30) * 1000),
            ("1G", 1_000_000_000_000),
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("+5", 5_000),
        ];
        for (text, millis) in cases {
            assert_eq!(parse_quantity_millis(text), Ok(millis), "{text}");
        }
        for bad in [
            "",
            "-1",
            "1x",
            "Mi",
            ".",
            "1..2",
            "9e30",
            "99999999999999999999999999999999999999Ei",
        ] {
            assert!(parse_quantity_millis(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn memory_rounds_milli_bytes_up() {
        let list = [("memory".to_owned(), Quantity("1500m".into()))].into();
        assert_eq!(Resources::from_list(Some(&list)).unwrap().memory_bytes, 2);
    }
}
