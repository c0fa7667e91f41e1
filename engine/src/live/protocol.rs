//! The query protocol of `DIR/argus.sock` (docs/query-protocol.md): JSON lines, one request
//! and one response per line, versioned, errors as objects.
//!
//! ```text
//!  → {"v":1,"id":7,"op":"diagnose","pid":4242}
//!  ← {"v":1,"id":7,"ok":true,"result":{"epoch":…,"diagnosis":{…}}}
//!  → {"v":1,"id":8,"op":"frobnicate"}
//!  ← {"v":1,"id":8,"ok":false,"error":{"code":"unknown_op","message":"…"}}
//! ```
//!
//! Parsing is in two steps so every failure gets its own code: the line as JSON
//! (`bad_request`), the version (`unsupported_version`), the operation's name
//! (`unknown_op`), then its parameters (`bad_request`, naming the field).

use argus_diagnose::Need;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version this build speaks.
pub const VERSION: u64 = 1;

/// Longest request line accepted (bytes): a `fetch` of a few thousand needs fits.
pub const MAX_LINE: usize = 4 << 20;

/// The operations, by name.
pub const OPS: [&str; 4] = ["status", "hangs", "diagnose", "fetch"];

/// One request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Echoed in the response (any JSON value; `null` when absent).
    pub id: Value,
    /// What is asked.
    pub op: Op,
}

/// What a request asks.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// Where the job stands.
    Status {
        /// Ignored (the envelope's fields).
        #[serde(default)]
        v: Option<Value>,
        /// Ignored.
        #[serde(default)]
        id: Option<Value>,
    },
    /// Spinning vertices.
    Hangs(HangsQuery),
    /// A hang's diagnosis, as `argus debug --json --auto` prints it.
    Diagnose(DiagnoseQuery),
    /// Parts of the live graph (what `argus debug DIR` reads to diagnose on its side).
    Fetch(FetchQuery),
}

/// `hangs`: which spins.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HangsQuery {
    #[serde(default)]
    v: Option<Value>,
    #[serde(default)]
    id: Option<Value>,
    /// Only this process's threads.
    #[serde(default)]
    pub pid: Option<i32>,
    /// Only this thread.
    #[serde(default)]
    pub tid: Option<i32>,
    /// Only threads of this name (thread or process name).
    #[serde(default)]
    pub comm: Option<String>,
    /// Only open (`true`) or only closed (`false`) spins.
    #[serde(default)]
    pub open: Option<bool>,
}

/// Which epoch a read is as of: the latest by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsOf {
    /// A global epoch (the numbering of snapshot names).
    pub epoch: Option<u64>,
    /// The epoch whose watermark this is (a snapshot's `watermark_ns`).
    pub watermark_ns: Option<u64>,
    /// The generation the epoch is read in (a client's later reads pass the first answer's).
    pub generation: Option<u64>,
}

/// `diagnose`: the target and the flags of `argus debug`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiagnoseQuery {
    #[serde(default)]
    v: Option<Value>,
    #[serde(default)]
    id: Option<Value>,
    /// Process whose main thread hangs.
    #[serde(default)]
    pub pid: Option<i32>,
    /// Thread that hangs.
    #[serde(default)]
    pub tid: Option<i32>,
    /// Process or thread name.
    #[serde(default)]
    pub comm: Option<String>,
    /// `--threshold` (s).
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    /// `--loop-wait`.
    #[serde(default)]
    pub loop_wait: Option<String>,
    /// `--beam`.
    #[serde(default = "default_beam")]
    pub beam: usize,
    /// `--lookback`.
    #[serde(default = "default_lookback")]
    pub lookback: usize,
    /// `--top`.
    #[serde(default = "default_top")]
    pub top: usize,
    /// Answers to the walk's questions, in order, as in an `--answers` file (a 1-based
    /// choice, `stop` or `default`); the rest take the default.
    #[serde(default)]
    pub answers: Vec<String>,
    /// As of this global epoch (see [`AsOf`]).
    #[serde(default)]
    pub epoch: Option<u64>,
    /// As of the epoch of this watermark.
    #[serde(default)]
    pub watermark_ns: Option<u64>,
    /// In this generation.
    #[serde(default)]
    pub generation: Option<u64>,
}

impl DiagnoseQuery {
    /// The epoch asked for.
    pub fn as_of(&self) -> AsOf {
        AsOf {
            epoch: self.epoch,
            watermark_ns: self.watermark_ns,
            generation: self.generation,
        }
    }
}

fn default_threshold() -> f64 {
    2.0
}
fn default_beam() -> usize {
    8
}
fn default_lookback() -> usize {
    2
}
fn default_top() -> usize {
    3
}

/// `fetch`: needs, as of an epoch.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchQuery {
    #[serde(default)]
    v: Option<Value>,
    #[serde(default)]
    id: Option<Value>,
    /// What to read (`argus_diagnose::Need`, tagged by `need`).
    #[serde(default)]
    pub needs: Vec<Need>,
    /// Also the tables a partial graph takes whole: threads, spins, lost ranges.
    #[serde(default)]
    pub whole: bool,
    /// As of this global epoch (see [`AsOf`]).
    #[serde(default)]
    pub epoch: Option<u64>,
    /// As of the epoch of this watermark.
    #[serde(default)]
    pub watermark_ns: Option<u64>,
    /// In this generation.
    #[serde(default)]
    pub generation: Option<u64>,
}

impl FetchQuery {
    /// The epoch asked for.
    pub fn as_of(&self) -> AsOf {
        AsOf {
            epoch: self.epoch,
            watermark_ns: self.watermark_ns,
            generation: self.generation,
        }
    }
}

/// What went wrong, for the client to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Code {
    /// Not JSON, not an object, a parameter missing or of the wrong type, a line too long.
    BadRequest,
    /// `v` is a version this job does not speak (`VERSION`).
    UnsupportedVersion,
    /// `op` names no operation.
    UnknownOp,
    /// The target is not in the live graph.
    NotFound,
    /// The live graph has no complete epoch yet, or not the one asked for.
    NotReady,
    /// The epoch asked for is compacted away (older than the last few seconds): ask again
    /// without one.
    Compacted,
    /// The generation asked for is not the running one, the live graph was given up, or the
    /// job is stopping: ask again without one.
    Gone,
    /// Too many clients at once.
    Busy,
    /// The job failed to answer.
    Internal,
}

/// An error, as the response carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// What kind.
    pub code: Code,
    /// In words.
    pub message: String,
}

impl Failure {
    /// An error of kind `code`.
    pub fn new(code: Code, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let code = serde_json::to_value(self.code).unwrap_or(Value::Null);
        write!(f, "{} ({})", self.message, code.as_str().unwrap_or("?"))
    }
}

impl std::error::Error for Failure {}

/// Parses one request line. On failure, the error carries the request's `id` when it could
/// be read.
pub fn parse(line: &str) -> Result<Request, (Value, Failure)> {
    let value: Value = serde_json::from_str(line).map_err(|e| {
        (
            Value::Null,
            Failure::new(Code::BadRequest, format!("not a JSON request: {e}")),
        )
    })?;
    let Some(obj) = value.as_object() else {
        return Err((
            Value::Null,
            Failure::new(Code::BadRequest, "a request is a JSON object"),
        ));
    };
    let id = obj.get("id").cloned().unwrap_or(Value::Null);
    let fail = |code, msg: String| Err((id.clone(), Failure::new(code, msg)));
    match obj.get("v") {
        None => {}
        Some(v) if v.as_u64() == Some(VERSION) => {}
        Some(v) => {
            return fail(
                Code::UnsupportedVersion,
                format!("protocol version {v} is not supported (this job speaks {VERSION})"),
            )
        }
    }
    let op = match obj.get("op") {
        Some(Value::String(op)) => op,
        Some(_) => return fail(Code::BadRequest, "\"op\" is a string".into()),
        None => return fail(Code::BadRequest, "a request names its \"op\"".into()),
    };
    if !OPS.contains(&op.as_str()) {
        return fail(
            Code::UnknownOp,
            format!("unknown op {op:?} (one of {})", OPS.join(", ")),
        );
    }
    match serde_json::from_value::<Op>(value.clone()) {
        Ok(op) => Ok(Request { id, op }),
        Err(e) => fail(Code::BadRequest, format!("{op}: {e}")),
    }
}

/// A response line (without its newline).
pub fn response(id: &Value, result: Result<Value, Failure>) -> String {
    let v = match result {
        Ok(result) => serde_json::json!({"v": VERSION, "id": id, "ok": true, "result": result}),
        Err(error) => serde_json::json!({"v": VERSION, "id": id, "ok": false, "error": error}),
    };
    v.to_string()
}

/// Reads a response line: its result, or its error.
pub fn read_response(line: &str) -> Result<Value, Failure> {
    let mut v: Value = serde_json::from_str(line).map_err(|e| {
        Failure::new(
            Code::Internal,
            format!("the job's response is not JSON: {e}"),
        )
    })?;
    if v["ok"].as_bool() == Some(true) {
        return Ok(v["result"].take());
    }
    match serde_json::from_value::<Failure>(v["error"].take()) {
        Ok(f) => Err(f),
        Err(e) => Err(Failure::new(
            Code::Internal,
            format!("the job's error is malformed: {e}"),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use argus_schema::{SegmentId, Tid};

    fn code(line: &str) -> (Value, Code) {
        let (id, f) = parse(line).unwrap_err();
        (id, f.code)
    }

    #[test]
    fn requests_parse_with_defaults_and_echo_their_id() {
        let r = parse(r#"{"v":1,"id":"a","op":"status"}"#).unwrap();
        assert_eq!(r.id, Value::from("a"));
        assert!(matches!(r.op, Op::Status { .. }));
        let r = parse(r#"{"op":"diagnose","pid":42,"epoch":7}"#).unwrap();
        assert_eq!(r.id, Value::Null, "no id, no version: version 1");
        let Op::Diagnose(q) = r.op else {
            panic!("{r:?}")
        };
        assert_eq!(
            (q.pid, q.tid, q.threshold, q.beam),
            (Some(42), None, 2.0, 8)
        );
        assert_eq!(q.as_of().epoch, Some(7));
        let r = parse(r#"{"op":"hangs","comm":"x","open":true}"#).unwrap();
        let Op::Hangs(q) = r.op else { panic!() };
        assert_eq!((q.comm.as_deref(), q.open), (Some("x"), Some(true)));
        let r = parse(
            r#"{"op":"fetch","whole":true,"generation":2,"needs":[{"need":"thread","tid":7},{"need":"incoming","id":30064771077},{"need":"threads"}]}"#,
        )
        .unwrap();
        let Op::Fetch(q) = r.op else { panic!() };
        assert!(q.whole);
        assert_eq!(q.as_of().generation, Some(2));
        assert_eq!(
            q.needs,
            vec![
                Need::Thread { tid: Tid(7) },
                Need::Incoming {
                    id: SegmentId(30064771077)
                },
                Need::Threads
            ]
        );
    }

    #[test]
    fn each_kind_of_bad_request_has_its_code() {
        assert_eq!(code("not json").1, Code::BadRequest);
        assert_eq!(code("[1]").1, Code::BadRequest);
        assert_eq!(code(r#"{"id":3}"#), (Value::from(3), Code::BadRequest));
        assert_eq!(
            code(r#"{"id":4,"v":2,"op":"status"}"#),
            (Value::from(4), Code::UnsupportedVersion)
        );
        assert_eq!(
            code(r#"{"id":5,"op":"frobnicate"}"#),
            (Value::from(5), Code::UnknownOp)
        );
        assert_eq!(code(r#"{"op":7}"#).1, Code::BadRequest);
        let (_, f) = parse(r#"{"op":"diagnose","pid":"x"}"#).unwrap_err();
        assert_eq!(f.code, Code::BadRequest);
        assert!(f.message.starts_with("diagnose: "), "{}", f.message);
        let (_, f) = parse(r#"{"op":"hangs","bogus":1}"#).unwrap_err();
        assert!(f.message.contains("bogus"), "{}", f.message);
    }

    #[test]
    fn responses_round_trip() {
        let ok = response(&Value::from(1), Ok(serde_json::json!({"epoch": 3})));
        assert_eq!(ok, r#"{"id":1,"ok":true,"result":{"epoch":3},"v":1}"#);
        assert_eq!(read_response(&ok).unwrap()["epoch"], 3);
        let err = response(
            &Value::Null,
            Err(Failure::new(Code::Compacted, "epoch 3 is gone")),
        );
        let f = read_response(&err).unwrap_err();
        assert_eq!(f, Failure::new(Code::Compacted, "epoch 3 is gone"));
        assert_eq!(f.to_string(), "epoch 3 is gone (compacted)");
    }
}
