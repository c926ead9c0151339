//! The API server's answers to Lease requests: routing, decoding, validation, and the `Status`
//! bodies of its errors.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Response, StatusCode};
use serde_json::{Map, Value, json};

use super::State;

const PREFIX: &str = "/apis/coordination.k8s.io/v1/namespaces/";

/// An error answer, boxed to keep `Result`s small.
type Refusal = Box<Response<Full<Bytes>>>;

pub(super) fn json_response(code: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = code;
    if let Ok(v) = "application/json".parse() {
        r.headers_mut().insert("content-type", v);
    }
    r
}

pub(super) fn status_response(
    code: StatusCode,
    reason: &str,
    message: &str,
    details: Option<Value>,
) -> Response<Full<Bytes>> {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(d) = details {
        body["details"] = d;
    }
    json_response(code, &body)
}

fn lease_details(name: &str) -> Value {
    json!({"name": name, "group": "coordination.k8s.io", "kind": "leases"})
}

fn not_found(name: &str) -> Response<Full<Bytes>> {
    status_response(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("leases.coordination.k8s.io \"{name}\" not found"),
        Some(lease_details(name)),
    )
}

fn bad_request(message: &str) -> Response<Full<Bytes>> {
    status_response(StatusCode::BAD_REQUEST, "BadRequest", message, None)
}

pub(super) fn handle(
    s: &mut State,
    method: &Method,
    path: &str,
    query: &str,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return status_response(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
            None,
        );
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match (method, parts.as_slice()) {
        (&Method::GET, [ns, "leases", name]) => {
            match s.leases.get(&((*ns).to_owned(), (*name).to_owned())) {
                Some(l) => json_response(StatusCode::OK, l),
                None => not_found(name),
            }
        }
        (&Method::GET, [ns, "leases"]) => list(s, ns, query),
        (&Method::DELETE, [ns, "leases", name]) => {
            match s.leases.remove(&((*ns).to_owned(), (*name).to_owned())) {
                Some(_) => json_response(
                    StatusCode::OK,
                    &json!({
                        "kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Success", "details": lease_details(name),
                    }),
                ),
                None => not_found(name),
            }
        }
        (&Method::POST, [ns, "leases"]) => match decode(body, ns, None, s.coordinated) {
            Err(r) => *r,
            Ok(lease) => warn_unknown(create(s, ns, lease), body, s.coordinated),
        },
        (&Method::PUT, [ns, "leases", name]) => match decode(body, ns, Some(name), s.coordinated) {
            Err(r) => *r,
            Ok(lease) => warn_unknown(replace(s, ns, name, lease), body, s.coordinated),
        },
        (_, [_, "leases"] | [_, "leases", _]) => status_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!("the server does not allow this method on the requested resource ({method})"),
            None,
        ),
        _ => status_response(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
            None,
        ),
    }
}

/// A `LeaseList` of the namespace's Leases in name order, narrowed by a `labelSelector` of
/// `key=value` terms (the only form the emulation reads; any other term is refused).
fn list(s: &State, ns: &str, query: &str) -> Response<Full<Bytes>> {
    let mut wanted = Vec::new();
    for (k, v) in query.split('&').filter_map(|kv| kv.split_once('=')) {
        if k != "labelSelector" {
            continue;
        }
        let selector = percent_decode(v);
        for term in selector.split(',').filter(|t| !t.is_empty()) {
            match term.split_once('=') {
                Some((lk, lv)) if !lk.ends_with('!') => wanted.push((lk.to_owned(), lv.to_owned())),
                _ => return bad_request(&format!("unsupported label selector term: {term}")),
            }
        }
    }
    let mut leases: Vec<_> = s.leases.iter().filter(|((n, _), _)| n == ns).collect();
    leases.sort_by(|a, b| a.0.1.cmp(&b.0.1));
    let items: Vec<Value> = leases
        .into_iter()
        .filter(|(_, lease)| {
            wanted
                .iter()
                .all(|(k, v)| lease["metadata"]["labels"][k].as_str() == Some(v))
        })
        .map(|(_, lease)| lease.clone())
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1",
            "metadata": {"resourceVersion": s.next_version.to_string()},
            "items": items,
        }),
    )
}

/// Decodes `%XX` escapes and `+` (a query string's space).
fn percent_decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => match v.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16)) {
                Some(Ok(b)) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn create(s: &mut State, ns: &str, mut lease: Value) -> Response<Full<Bytes>> {
    let name = lease["metadata"]["name"].as_str().unwrap_or("").to_owned();
    if let Err(r) = validate(&lease, &name) {
        return *r;
    }
    if s.leases.contains_key(&(ns.to_owned(), name.clone())) {
        return status_response(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("leases.coordination.k8s.io \"{name}\" already exists"),
            Some(lease_details(&name)),
        );
    }
    s.next_version += 1;
    s.next_uid += 1;
    let meta = &mut lease["metadata"];
    meta["resourceVersion"] = Value::String(s.next_version.to_string());
    meta["uid"] = Value::String(format!("00000000-0000-4000-8000-{:012x}", s.next_uid));
    meta["creationTimestamp"] = Value::String("2026-01-01T00:00:00Z".to_owned());
    s.leases.insert((ns.to_owned(), name), lease.clone());
    json_response(StatusCode::CREATED, &lease)
}

fn replace(s: &mut State, ns: &str, name: &str, mut lease: Value) -> Response<Full<Bytes>> {
    let key = (ns.to_owned(), name.to_owned());
    let sent_rv = lease["metadata"]["resourceVersion"]
        .as_str()
        .filter(|v| !v.is_empty())
        .map(str::to_owned);
    let Some(current) = s.leases.get(&key).cloned() else {
        // Leases allow create on update. kube-apiserver takes a sent uid as a precondition,
        // which a missing object fails (a replace of a deleted Lease as last read); without one
        // the Lease is created, whatever resourceVersion was sent.
        if let Some(uid) = lease["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
            return status_response(
                StatusCode::CONFLICT,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": \
                     StorageError: invalid object, Code: 4, Key: /registry/leases/{ns}/{name}, \
                     ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in \
                     precondition: {uid}, UID in object meta: "
                ),
                Some(lease_details(name)),
            );
        }
        if let Some(meta) = lease["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        return create(s, ns, lease);
    };
    let Some(sent_rv) = sent_rv else {
        return status_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            &format!(
                "Lease.coordination.k8s.io \"{name}\" is invalid: metadata.resourceVersion: \
                 Invalid value: 0x0: must be specified for an update"
            ),
            Some(lease_details(name)),
        );
    };
    if current["metadata"]["resourceVersion"].as_str() != Some(sent_rv.as_str()) {
        return status_response(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the \
                 object has been modified; please apply your changes to the latest version and \
                 try again"
            ),
            Some(lease_details(name)),
        );
    }
    if let Err(r) = validate(&lease, name) {
        return *r;
    }
    // Server-owned fields stay as stored.
    for field in ["uid", "creationTimestamp"] {
        lease["metadata"][field] = current["metadata"][field].clone();
    }
    if lease != current {
        s.next_version += 1;
        lease["metadata"]["resourceVersion"] = Value::String(s.next_version.to_string());
    }
    s.leases.insert(key, lease.clone());
    json_response(StatusCode::OK, &lease)
}

/// Adds the API server's `Warning: 299` header for each unknown top-level or `spec` field the
/// write dropped (`metadata`'s many other fields are dropped without one).
fn warn_unknown(
    mut resp: Response<Full<Bytes>>,
    body: &[u8],
    coordinated: bool,
) -> Response<Full<Bytes>> {
    let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(body) else {
        return resp;
    };
    let mut unknown: Vec<String> = obj
        .keys()
        .filter(|k| !["apiVersion", "kind", "metadata", "spec"].contains(&k.as_str()))
        .cloned()
        .collect();
    if let Some(Value::Object(spec)) = obj.get("spec") {
        let mut known = vec![
            "holderIdentity",
            "leaseDurationSeconds",
            "acquireTime",
            "renewTime",
            "leaseTransitions",
        ];
        if coordinated {
            known.extend(["strategy", "preferredHolder"]);
        }
        unknown.extend(
            spec.keys()
                .filter(|k| !known.contains(&k.as_str()))
                .map(|k| format!("spec.{k}")),
        );
    }
    for field in unknown {
        if let Ok(v) = format!("299 - \"unknown field \\\"{field}\\\"\"").parse() {
            resp.headers_mut().append("warning", v);
        }
    }
    resp
}

/// Decodes a Lease as the API server's decoder would: 400 for what does not decode; unknown
/// fields dropped.
fn decode(
    body: &[u8],
    ns: &str,
    url_name: Option<&str>,
    coordinated: bool,
) -> Result<Value, Refusal> {
    let cannot = |why: &str| -> Refusal {
        Box::new(bad_request(&format!(
            "Lease in version \"v1\" cannot be handled as a Lease: {why}"
        )))
    };
    let v: Value = serde_json::from_slice(body).map_err(|e| cannot(&e.to_string()))?;
    let Value::Object(obj) = v else {
        return Err(cannot("the body is not an object"));
    };
    let str_field = |o: &Map<String, Value>, k: &str| -> Result<Option<String>, Refusal> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(cannot(&format!("{k}: expected a string"))),
        }
    };
    let int_field = |o: &Map<String, Value>, k: &str| -> Result<Option<i64>, Refusal> {
        match o.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .filter(|n| i32::try_from(*n).is_ok())
                .map(Some)
                .ok_or_else(|| cannot(&format!("{k}: expected an int32"))),
            Some(_) => Err(cannot(&format!("{k}: expected a number"))),
        }
    };
    if let Some(kind) = str_field(&obj, "kind")?
        && kind != "Lease"
    {
        return Err(Box::new(bad_request(&format!(
            "Lease in version \"v1\" cannot be handled as a {kind}"
        ))));
    }
    let meta = match obj.get("metadata") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(cannot("metadata: expected an object")),
    };
    let mut out_meta = Map::new();
    for k in [
        "name",
        "namespace",
        "resourceVersion",
        "uid",
        "creationTimestamp",
    ] {
        if let Some(s) = str_field(&meta, k)? {
            out_meta.insert(k.to_owned(), Value::String(s));
        }
    }
    for k in ["labels", "annotations"] {
        match meta.get(k) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) if m.values().all(Value::is_string) => {
                out_meta.insert(k.to_owned(), Value::Object(m.clone()));
            }
            Some(_) => return Err(cannot(&format!("metadata.{k}: expected strings"))),
        }
    }
    match meta.get("ownerReferences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            out_meta.insert("ownerReferences".to_owned(), Value::Array(a.clone()));
        }
        Some(_) => return Err(cannot("metadata.ownerReferences: expected an array")),
    }
    match out_meta.get("namespace").and_then(Value::as_str) {
        None => {
            out_meta.insert("namespace".to_owned(), Value::String(ns.to_owned()));
        }
        Some(n) if n == ns => {}
        Some(_) => {
            return Err(Box::new(bad_request(
                "the namespace of the provided object does not match the namespace sent on the \
                 request",
            )));
        }
    }
    if let Some(url_name) = url_name {
        match out_meta.get("name").and_then(Value::as_str) {
            Some(n) if n == url_name => {}
            Some(n) => {
                return Err(Box::new(bad_request(&format!(
                    "the name of the object ({n}) does not match the name on the URL ({url_name})"
                ))));
            }
            None => {
                out_meta.insert("name".to_owned(), Value::String(url_name.to_owned()));
            }
        }
    }
    let spec = match obj.get("spec") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(cannot("spec: expected an object")),
    };
    let mut out_spec = Map::new();
    let mut strings = vec!["holderIdentity"];
    if coordinated {
        strings.extend(["strategy", "preferredHolder"]);
    }
    for k in strings {
        if let Some(s) = str_field(&spec, k)? {
            out_spec.insert(k.to_owned(), Value::String(s));
        }
    }
    for k in ["leaseDurationSeconds", "leaseTransitions"] {
        if let Some(n) = int_field(&spec, k)? {
            out_spec.insert(k.to_owned(), Value::from(n));
        }
    }
    for k in ["acquireTime", "renewTime"] {
        if let Some(t) = str_field(&spec, k)? {
            if !is_micro_time(&t) {
                return Err(cannot(&format!(
                    "parsing time \"{t}\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse"
                )));
            }
            out_spec.insert(k.to_owned(), Value::String(t));
        }
    }
    let mut out = Map::new();
    out.insert("kind".to_owned(), Value::String("Lease".to_owned()));
    out.insert(
        "apiVersion".to_owned(),
        Value::String("coordination.k8s.io/v1".to_owned()),
    );
    out.insert("metadata".to_owned(), Value::Object(out_meta));
    out.insert("spec".to_owned(), Value::Object(out_spec));
    Ok(Value::Object(out))
}

/// `MicroTime`'s wire format: RFC 3339 with exactly six fractional digits and a zone.
fn is_micro_time(t: &str) -> bool {
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let head = digits(0..4)
        && at(4, b'-')
        && digits(5..7)
        && at(7, b'-')
        && digits(8..10)
        && at(10, b'T')
        && digits(11..13)
        && at(13, b':')
        && digits(14..16)
        && at(16, b':')
        && digits(17..19)
        && at(19, b'.')
        && digits(20..26);
    let zone = &t.get(26..).unwrap_or("");
    head && (*zone == "Z"
        || (zone.len() == 6
            && (zone.starts_with('+') || zone.starts_with('-'))
            && zone.as_bytes()[3] == b':'
            && zone[1..3]
                .bytes()
                .chain(zone[4..].bytes())
                .all(|c| c.is_ascii_digit())))
}

/// Validation after decoding: 422 with the API server's field messages.
fn validate(lease: &Value, name: &str) -> Result<(), Refusal> {
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push((
            "metadata.name",
            "Required value: name or generateName is required".to_owned(),
        ));
    } else if !is_dns_subdomain(name) {
        causes.push((
            "metadata.name",
            format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower \
                 case alphanumeric characters, '-' or '.', and must start and end with an \
                 alphanumeric character"
            ),
        ));
    }
    let spec = &lease["spec"];
    if let Some(d) = spec["leaseDurationSeconds"].as_i64()
        && d <= 0
    {
        causes.push((
            "spec.leaseDurationSeconds",
            format!("Invalid value: {d}: must be greater than 0"),
        ));
    }
    if let Some(t) = spec["leaseTransitions"].as_i64()
        && t < 0
    {
        causes.push((
            "spec.leaseTransitions",
            format!("Invalid value: {t}: must be greater than or equal to 0"),
        ));
    }
    if spec.get("preferredHolder").is_some() && spec.get("strategy").is_none() {
        causes.push((
            "spec.strategy",
            "Required value: must be specified when preferredHolder is set".to_owned(),
        ));
    }
    if causes.is_empty() {
        return Ok(());
    }
    let message = format!(
        "Lease.coordination.k8s.io \"{name}\" is invalid: {}",
        causes
            .iter()
            .map(|(f, m)| format!("{f}: {m}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut details = lease_details(name);
    details["causes"] = causes
        .iter()
        .map(|(f, m)| json!({"reason": "FieldValueInvalid", "message": m, "field": f}))
        .collect();
    Err(Box::new(status_response(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        &message,
        Some(details),
    )))
}

fn is_dns_subdomain(name: &str) -> bool {
    let ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let b = name.as_bytes();
    name.len() <= 253
        && b.first().copied().is_some_and(ok)
        && b.last().copied().is_some_and(ok)
        && b.iter().all(|&c| ok(c) || c == b'-' || c == b'.')
}
