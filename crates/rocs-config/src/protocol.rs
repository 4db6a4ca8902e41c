//! The control socket's wire format, spoken by rocsd and rocsctl.
//!
//! One JSON object per line each way. A request names the protocol version and the request:
//! `{"v":1,"id":7,"request":"profile","target":"1234"}`. The reply echoes the id:
//! `{"v":1,"id":7,"ok":true,"result":{...}}` or
//! `{"v":1,"id":7,"ok":false,"error":{"code":"no_such_target","message":"..."}}`.
//! Requests longer than [`MAX_REQUEST_LINE`] bytes are refused and the connection closed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u64 = 1;
/// Longest request line accepted (bytes, without the newline).
pub const MAX_REQUEST_LINE: usize = 64 * 1024;

/// What a client asks. Targets are named by pid, or by command name when that is unique.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Status,
    Targets,
    Profile {
        target: String,
    },
    Stack {
        target: String,
        /// At most this many entries from the top (all when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    History {
        target: String,
    },
    /// Stop searching and migrating (all targets when `target` is absent).
    Pause {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    },
    Resume {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    },
    /// Move pages back out of the pollute buffer (all targets when `target` is absent),
    /// and pause the targets so that no search confines them again until `resume`.
    Restore {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
    },
    /// Re-read the policy files.
    Reload,
    /// Confine pages of a target by name, outside the search: the pages of the address
    /// range `[start, end)`, or the `top` pages of its current miss-rate stack (exactly
    /// one of the two).
    Confine {
        target: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        range: Option<[u64; 2]>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        top: Option<usize>,
    },
}

impl Request {
    /// Requests that change what rocsd does (root only); the others only read.
    pub fn changes_state(&self) -> bool {
        matches!(
            self,
            Request::Pause { .. }
                | Request::Resume { .. }
                | Request::Restore { .. }
                | Request::Reload
                | Request::Confine { .. }
        )
    }

    pub fn name(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::Targets => "targets",
            Request::Profile { .. } => "profile",
            Request::Stack { .. } => "stack",
            Request::History { .. } => "history",
            Request::Pause { .. } => "pause",
            Request::Resume { .. } => "resume",
            Request::Restore { .. } => "restore",
            Request::Reload => "reload",
            Request::Confine { .. } => "confine",
        }
    }
}

/// Machine-readable kinds of failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadJson,
    BadVersion,
    UnknownRequest,
    BadRequest,
    TooLong,
    Timeout,
    PermissionDenied,
    NoSuchTarget,
    AmbiguousTarget,
    ReloadFailed,
    Unavailable,
    Internal,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ErrorReply {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorReply {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorReply {
            code,
            message: message.into(),
        }
    }
}

/// A parsed request line: the request and the id to echo.
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    pub id: Option<Value>,
    pub request: Request,
}

/// Parse one request line. Every way a line can be wrong gives an error reply (with the id,
/// when one could be read), never a panic.
pub fn parse_request(line: &[u8]) -> Result<Envelope, (Option<Value>, ErrorReply)> {
    if line.len() > MAX_REQUEST_LINE {
        return Err((
            None,
            ErrorReply::new(
                ErrorCode::TooLong,
                format!("request longer than {MAX_REQUEST_LINE} bytes"),
            ),
        ));
    }
    let value: Value = serde_json::from_slice(line).map_err(|e| {
        (
            None,
            ErrorReply::new(ErrorCode::BadJson, format!("not a JSON request: {e}")),
        )
    })?;
    let Value::Object(mut obj) = value else {
        return Err((
            None,
            ErrorReply::new(ErrorCode::BadJson, "a request is a JSON object"),
        ));
    };
    let id = obj.remove("id");
    let fail = |code, msg: String| Err((id.clone(), ErrorReply::new(code, msg)));
    match obj.remove("v") {
        Some(Value::Number(n)) if n.as_u64() == Some(PROTOCOL_VERSION) => {}
        Some(v) => {
            return fail(
                ErrorCode::BadVersion,
                format!(
                    "protocol version {v} is not spoken here; this rocsd speaks {PROTOCOL_VERSION}"
                ),
            )
        }
        None => {
            return fail(
                ErrorCode::BadVersion,
                format!(
                "the request has no protocol version \"v\" (this rocsd speaks {PROTOCOL_VERSION})"
            ),
            )
        }
    }
    let name = match obj.get("request") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return fail(ErrorCode::BadRequest, "\"request\" must be a string".into()),
        None => {
            return fail(
                ErrorCode::BadRequest,
                "the object has no \"request\"".into(),
            )
        }
    };
    const KNOWN: &[&str] = &[
        "status", "targets", "profile", "stack", "history", "pause", "resume", "restore", "reload",
        "confine",
    ];
    if !KNOWN.contains(&name.as_str()) {
        let shown: String = name.chars().take(64).collect();
        return fail(
            ErrorCode::UnknownRequest,
            format!("unknown request {shown:?}; known: {}", KNOWN.join(", ")),
        );
    }
    // Unknown fields are refused by hand: serde ignores them on unit variants of a tagged
    // enum, and a misspelt field must not silently mean "all targets".
    let allowed: &[&str] = match name.as_str() {
        "profile" | "history" | "pause" | "resume" | "restore" => &["request", "target"],
        "stack" => &["request", "target", "limit"],
        "confine" => &["request", "target", "range", "top"],
        _ => &["request"],
    };
    if let Some(extra) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        let shown: String = extra.chars().take(64).collect();
        return fail(
            ErrorCode::BadRequest,
            format!(
                "{name}: unknown field {shown:?}; allowed: {}",
                allowed[1..].join(", ")
            ),
        );
    }
    match serde_json::from_value::<Request>(Value::Object(obj)) {
        Ok(Request::Confine { range, top, .. }) if range.is_some() == top.is_some() => fail(
            ErrorCode::BadRequest,
            "confine: give either \"range\" [start, end] or \"top\" K".into(),
        ),
        Ok(Request::Confine {
            range: Some([start, end]),
            ..
        }) if start >= end => fail(
            ErrorCode::BadRequest,
            format!("confine: range [{start:#x}, {end:#x}) is empty"),
        ),
        Ok(request) => Ok(Envelope { id, request }),
        Err(e) => fail(ErrorCode::BadRequest, format!("{name}: {e}")),
    }
}

/// Encode a request line (with its newline).
pub fn encode_request(id: u64, request: &Request) -> String {
    let mut v = serde_json::to_value(request).expect("a request always serializes");
    if let Value::Object(o) = &mut v {
        o.insert("v".into(), PROTOCOL_VERSION.into());
        o.insert("id".into(), id.into());
    }
    let mut s = v.to_string();
    s.push('\n');
    s
}

/// Encode a reply line (with its newline).
pub fn encode_reply(id: Option<&Value>, result: Result<Value, &ErrorReply>) -> String {
    let mut o = serde_json::Map::new();
    o.insert("v".into(), PROTOCOL_VERSION.into());
    if let Some(id) = id {
        o.insert("id".into(), id.clone());
    }
    match result {
        Ok(r) => {
            o.insert("ok".into(), true.into());
            o.insert("result".into(), r);
        }
        Err(e) => {
            o.insert("ok".into(), false.into());
            o.insert(
                "error".into(),
                serde_json::to_value(e).expect("an error always serializes"),
            );
        }
    }
    let mut s = Value::Object(o).to_string();
    s.push('\n');
    s
}

/// A reply line as a client reads it.
#[derive(Clone, Debug, Deserialize)]
pub struct Reply {
    pub v: u64,
    #[serde(default)]
    pub id: Option<Value>,
    pub ok: bool,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub error: Option<ErrorReply>,
}

impl Reply {
    /// The result, or the daemon's error.
    pub fn into_result(self) -> Result<Value, ErrorReply> {
        if self.ok {
            Ok(self.result.unwrap_or(Value::Null))
        } else {
            Err(self.error.unwrap_or_else(|| {
                ErrorReply::new(ErrorCode::Internal, "the reply has ok=false and no error")
            }))
        }
    }
}

// The results. rocsd fills them; rocsctl prints them.

/// `status`: the daemon as a whole.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusReply {
    pub version: String,
    pub protocol: u64,
    pub pid: u32,
    pub platform: String,
    pub uptime_s: f64,
    /// What rocsd can do here: "full", "observe-and-profile" (no shim), "observe-only"
    /// (no PMU; software events).
    pub capability: String,
    /// The notices said once at start (missing PMU, missing shim, ...).
    pub notices: Vec<String>,
    pub llc: Option<rocs_core::CacheGeometry>,
    pub colours: u32,
    pub policies: Vec<PolicySummary>,
    pub targets: usize,
    pub targets_seen: u64,
    pub targets_exited: u64,
    /// Targets whose events opened and were read at least once.
    pub targets_measured: u64,
    pub reloads: u64,
    pub last_reload_error: Option<String>,
    /// The operator paused every target (`pause` or `restore` without a target); targets
    /// found later start paused too.
    pub paused: bool,
    /// The targets paused now, by pid: all of them when `paused`, else those paused or
    /// restored one by one.
    #[serde(default)]
    pub paused_targets: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicySummary {
    pub name: String,
    pub file: String,
}

/// One target, as `targets` lists it and other replies head it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TargetSummary {
    pub pid: u32,
    pub comm: String,
    pub policy: String,
    /// The controller's state: observe, profile, search, steady (or exited).
    pub state: String,
    pub paused: bool,
    /// "full", "observe-and-profile" or "observe-only".
    pub capability: String,
    pub windows: u64,
    pub ipc: f64,
    pub mpki: f64,
    pub pages_profiled: usize,
    pub pages_confined: usize,
    pub samples: u64,
    pub lost_samples: u64,
    /// Samples the kernel withheld to keep the sampling rate in bounds.
    #[serde(default)]
    pub throttled_samples: u64,
    /// Pages moved, into the pollute buffer or back.
    #[serde(default)]
    pub pages_migrated: u64,
    /// Pages that could not be moved.
    #[serde(default)]
    pub migration_failures: u64,
    pub uptime_s: f64,
    /// The last error the platform gave for this target, if any.
    pub last_error: Option<String>,
}

/// One page of a profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRow {
    pub page: u64,
    pub hits: u32,
    pub misses: u32,
    pub other: u32,
    pub confined: bool,
}

/// `profile TARGET`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileReply {
    pub target: TargetSummary,
    pub page_shift: u32,
    pub samples: u64,
    /// Ordered by address.
    pub pages: Vec<PageRow>,
}

/// `stack TARGET`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StackReply {
    pub target: TargetSummary,
    pub page_shift: u32,
    /// Entries in the stack (before any limit).
    pub total: usize,
    /// How many from the top are confined now.
    pub k: usize,
    pub entries: Vec<rocs_core::StackEntry>,
    /// Pages confined by name (`confine`, or a policy's mappings), outside the stack the
    /// search ranks, by address.
    #[serde(default)]
    pub explicit: Vec<u64>,
}

/// One event of a target's history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The window the event happened in.
    pub window: u64,
    /// A short word: state, search, phase, migrate, error, operator, ...
    pub kind: String,
    /// What happened and why, for people.
    pub text: String,
    /// The controller's own record, for scripts.
    #[serde(default)]
    pub detail: Value,
}

/// `history TARGET`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryReply {
    pub target: TargetSummary,
    pub events: Vec<HistoryEntry>,
}

/// `pause`, `resume`, `restore`: what was done to which targets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionReply {
    pub action: String,
    pub targets: Vec<u32>,
    /// `restore`: the pages of those targets moved back out of the pollute buffer before
    /// this reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages_restored: Option<usize>,
    /// `restore`: their pages still confined when this reply was sent: still going back
    /// (at most `page_budget` pages move per window), or pages that could not move (their
    /// history says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages_still_confined: Option<usize>,
}

/// `confine`: what naming the pages did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfineReply {
    pub target: u32,
    /// Pages the request named.
    pub pages: usize,
    /// Of those, how many are confined now.
    pub confined: usize,
    /// Pages of the target confined by name in all.
    pub explicit: usize,
}

/// `reload`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReply {
    pub policies: Vec<PolicySummary>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_every_request() {
        let all = [
            Request::Status,
            Request::Targets,
            Request::Profile {
                target: "12".into(),
            },
            Request::Stack {
                target: "art".into(),
                limit: Some(5),
            },
            Request::Stack {
                target: "art".into(),
                limit: None,
            },
            Request::History {
                target: "12".into(),
            },
            Request::Pause { target: None },
            Request::Resume {
                target: Some("12".into()),
            },
            Request::Restore { target: None },
            Request::Reload,
            Request::Confine {
                target: "12".into(),
                range: Some([0x1000, 0x3000]),
                top: None,
            },
            Request::Confine {
                target: "art".into(),
                range: None,
                top: Some(64),
            },
        ];
        for (i, r) in all.into_iter().enumerate() {
            let line = encode_request(i as u64, &r);
            assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
            let e = parse_request(line.trim_end().as_bytes()).unwrap();
            assert_eq!(e.request, r);
            assert_eq!(e.id, Some(Value::from(i as u64)));
        }
    }

    #[test]
    fn bad_lines_get_the_right_error() {
        let code = |s: &str| parse_request(s.as_bytes()).unwrap_err().1.code;
        assert_eq!(code("{"), ErrorCode::BadJson);
        assert_eq!(code("[1,2]"), ErrorCode::BadJson);
        assert_eq!(code(r#"{"request":"status"}"#), ErrorCode::BadVersion);
        assert_eq!(code(r#"{"v":2,"request":"status"}"#), ErrorCode::BadVersion);
        assert_eq!(
            code(r#"{"v":1,"request":"format_disk"}"#),
            ErrorCode::UnknownRequest
        );
        assert_eq!(code(r#"{"v":1,"request":7}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1}"#), ErrorCode::BadRequest);
        assert_eq!(
            code(r#"{"v":1,"request":"profile"}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(r#"{"v":1,"request":"status","x":1}"#),
            ErrorCode::BadRequest
        );
        let long = format!(
            r#"{{"v":1,"request":"status","pad":"{}"}}"#,
            "x".repeat(MAX_REQUEST_LINE)
        );
        assert_eq!(code(&long), ErrorCode::TooLong);
        for confine in [
            r#"{"v":1,"request":"confine","target":"1"}"#,
            r#"{"v":1,"request":"confine","target":"1","top":3,"range":[0,4096]}"#,
            r#"{"v":1,"request":"confine","target":"1","range":[8192,4096]}"#,
            r#"{"v":1,"request":"confine","target":"1","range":[1]}"#,
            r#"{"v":1,"request":"confine","target":"1","pages":[1]}"#,
        ] {
            assert_eq!(code(confine), ErrorCode::BadRequest, "{confine}");
        }
        let confine = Request::Confine {
            target: "1".into(),
            range: None,
            top: Some(1),
        };
        assert!(confine.changes_state(), "root only");
        // The id comes back even when the request is wrong.
        let (id, _) = parse_request(br#"{"v":1,"id":"a","request":"nope"}"#).unwrap_err();
        assert_eq!(id, Some(Value::from("a")));
    }

    #[test]
    fn replies_decode() {
        let ok = encode_reply(Some(&Value::from(3)), Ok(serde_json::json!({"x": 1})));
        let r: Reply = serde_json::from_str(&ok).unwrap();
        assert_eq!(r.into_result().unwrap()["x"], 1);
        let err = ErrorReply::new(ErrorCode::PermissionDenied, "no");
        let line = encode_reply(None, Err(&err));
        let r: Reply = serde_json::from_str(&line).unwrap();
        assert_eq!(r.into_result().unwrap_err(), err);
    }

    proptest! {
        // The parser never panics, whatever the bytes, and answers every line.
        #[test]
        fn parser_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_request(&bytes);
        }

        // Near-valid JSON objects: real keys with arbitrary values.
        #[test]
        fn parser_handles_any_field_values(
            v in prop_oneof![Just(Value::from(1)), any::<i64>().prop_map(Value::from), ".*".prop_map(Value::from)],
            req in prop_oneof![
                Just("status".to_string()), Just("profile".to_string()),
                Just("stack".to_string()), Just("pause".to_string()), "[a-z]{0,12}"
            ],
            target in prop_oneof![Just(Value::Null), any::<u32>().prop_map(Value::from), ".{0,20}".prop_map(Value::from)],
            limit in prop_oneof![Just(Value::Null), any::<i64>().prop_map(Value::from), any::<f64>().prop_map(Value::from)],
        ) {
            let line = serde_json::json!({"v": v, "request": req, "target": target, "limit": limit}).to_string();
            match parse_request(line.as_bytes()) {
                Ok(e) => {
                    // Whatever was accepted re-encodes to a line that parses the same.
                    let again = encode_request(0, &e.request);
                    prop_assert_eq!(parse_request(again.trim_end().as_bytes()).unwrap().request, e.request);
                }
                Err((_, e)) => prop_assert!(!e.message.is_empty()),
            }
        }
    }
}
