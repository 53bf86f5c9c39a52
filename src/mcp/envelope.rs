//! A thin JSON-RPC envelope check in front of rmcp's stdio transport.
//!
//! rmcp (3.11) drops a line that is not JSON without a word, answers an invalid envelope
//! (`jsonrpc` missing or not "2.0", a non-string `method`, non-object `params`) with
//! `-32600` but *without* the request's id, and answers `tools/call` without params, or with
//! non-object `arguments`, as `-32601 method not found`; a numeric id that is not an i64
//! (2^63, 1.5) gets `-32600` without the id too, and a line that is not UTF-8 would end
//! the input (and the server). A client waiting on that id would hang. So `slm mcp` reads
//! stdin line by line here (MCP's stdio framing is one message a line) and answers such
//! lines itself, with the id when there is one (JSON-RPC: `null` when it cannot be read):
//! `-32700` for a line that is not UTF-8 JSON, `-32600` for an invalid envelope, `-32602`
//! for bad `params`. Every other line goes to rmcp unchanged, and rmcp's
//! output goes to stdout unchanged; both writers share one line-atomic stdout.

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const INVALID_PARAMS: i64 = -32602;

/// What to do with one input line.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// A well-formed message (or a blank line): rmcp handles it.
    Pass,
    /// Answer this (one JSON value, written as one line) and do not pass the line on.
    Reply(Value),
}

fn error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// The envelope error of one message, if any (`None`: pass it on).
fn check_message(v: &Value) -> Option<Value> {
    let Some(obj) = v.as_object() else {
        return Some(error(Value::Null, INVALID_REQUEST, "Invalid Request: a message must be a JSON object"));
    };
    let id = match obj.get("id") {
        None => Value::Null,
        Some(id @ Value::String(_)) => id.clone(),
        // rmcp reads a numeric id as an i64 and answers any other number without the id.
        Some(Value::Number(n)) if n.is_i64() => Value::Number(n.clone()),
        Some(id @ Value::Number(_)) => {
            return Some(error(id.clone(), INVALID_REQUEST, "Invalid Request: a numeric id must be an integer from -2^63 to 2^63-1"))
        }
        Some(_) => return Some(error(Value::Null, INVALID_REQUEST, "Invalid Request: id must be a string or a number")),
    };
    let Some(method) = obj.get("method") else {
        // A response to one of our requests (result or error) goes to rmcp; anything else
        // with neither method nor result is no message at all.
        if obj.contains_key("result") || obj.contains_key("error") {
            return None;
        }
        return Some(error(id, INVALID_REQUEST, "Invalid Request: a request needs a method"));
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some(error(id, INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\""));
    }
    let Some(method) = method.as_str() else {
        return Some(error(id, INVALID_REQUEST, "Invalid Request: method must be a string"));
    };
    let params = obj.get("params");
    if params.is_some_and(|p| !p.is_object()) {
        return Some(error(id, INVALID_PARAMS, format!("Invalid params: params of {method} must be an object")));
    }
    if method == "tools/call" {
        let Some(p) = params else {
            return Some(error(id, INVALID_PARAMS, "Invalid params: tools/call needs params {name, arguments}"));
        };
        if !p.get("name").is_some_and(Value::is_string) {
            return Some(error(id, INVALID_PARAMS, "Invalid params: tools/call needs a string name"));
        }
        if p.get("arguments").is_some_and(|a| !a.is_object() && !a.is_null()) {
            return Some(error(id, INVALID_PARAMS, "Invalid params: tools/call arguments must be an object"));
        }
    }
    None
}

/// Decides what to do with one line of input.
pub fn check_line(line: &str) -> Verdict {
    if line.trim().is_empty() {
        return Verdict::Pass;
    }
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return Verdict::Reply(error(Value::Null, PARSE_ERROR, format!("Parse error: {e}"))),
    };
    match &v {
        // MCP has no batches (2025-06-18); still, answer every member that has an id.
        Value::Array(items) if !items.is_empty() => {
            let errors: Vec<Value> = items
                .iter()
                .map(|m| {
                    check_message(m).unwrap_or_else(|| {
                        error(m.get("id").cloned().unwrap_or(Value::Null), INVALID_REQUEST, "Invalid Request: batches are not supported")
                    })
                })
                .collect();
            Verdict::Reply(Value::Array(errors))
        }
        _ => check_message(&v).map_or(Verdict::Pass, Verdict::Reply),
    }
}

/// Serves one side of the filter: reads `input` line by line, answers bad lines on `out`
/// and writes good ones to `to_rmcp`. Returns at end of input (dropping `to_rmcp`, which
/// rmcp sees as the end of its input) or when rmcp stops reading.
pub async fn filter_input<R, W>(input: R, mut to_rmcp: W, out: mpsc::UnboundedSender<String>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    let mut raw = Vec::new();
    loop {
        raw.clear();
        match input.read_until(b'\n', &mut raw).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        for end in [b'\n', b'\r'] {
            if raw.last() == Some(&end) {
                raw.pop();
            }
        }
        // A line that is not UTF-8 is a parse error like any other bad line; reading it as
        // text would end the input, and with it the server.
        let verdict = match std::str::from_utf8(&raw) {
            Ok(line) => check_line(line),
            Err(e) => Verdict::Reply(error(Value::Null, PARSE_ERROR, format!("Parse error: not UTF-8: {e}"))),
        };
        match verdict {
            Verdict::Pass => {
                if to_rmcp.write_all(&raw).await.is_err() || to_rmcp.write_all(b"\n").await.is_err() {
                    break;
                }
                let _ = to_rmcp.flush().await;
            }
            Verdict::Reply(v) => {
                if out.send(v.to_string()).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to_rmcp.shutdown().await;
}

/// Forwards rmcp's output lines to the shared stdout writer.
pub async fn forward_output<R>(from_rmcp: R, out: mpsc::UnboundedSender<String>)
where
    R: AsyncRead + Unpin,
{
    let mut lines = BufReader::new(from_rmcp).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if out.send(line).is_err() {
            break;
        }
    }
}

/// Writes every line it receives to `stdout`, one whole line at a time, until every sender
/// is gone or stdout fails (a closed pipe).
pub async fn write_lines<W>(mut stdout: W, mut lines: mpsc::UnboundedReceiver<String>)
where
    W: AsyncWrite + Unpin,
{
    while let Some(mut line) = lines.recv().await {
        line.push('\n');
        if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(line: &str) -> Value {
        match check_line(line) {
            Verdict::Reply(v) => v,
            Verdict::Pass => panic!("{line} passed"),
        }
    }

    #[test]
    fn bad_envelopes_are_answered_with_their_id_and_good_ones_pass() {
        assert_eq!(reply("{\"jsonrpc\":\"2.0\",\"id\":1,")["error"]["code"], PARSE_ERROR);
        assert_eq!(reply("hello")["id"], Value::Null);
        let cases = [
            (r#"{"id":7,"method":"tools/list"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"1.0","id":7,"method":"tools/list"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":7,"method":5}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":[1]}"#, INVALID_PARAMS),
            (r#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#, INVALID_PARAMS),
            (r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"status","arguments":"x"}}"#, INVALID_PARAMS),
            (r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}"#, INVALID_PARAMS),
            (r#"{"jsonrpc":"2.0","id":7}"#, INVALID_REQUEST),
        ];
        for (line, code) in cases {
            let r = reply(line);
            assert_eq!((r["id"].clone(), r["error"]["code"].as_i64()), (json!(7), Some(code)), "{line}");
        }
        assert_eq!(reply(r#"{"id":"a","method":"ping"}"#)["id"], "a");
        // Numbers rmcp cannot read as an id (not an i64) are answered here, with the id.
        for id in ["9223372036854775808", "1.5"] {
            let r = reply(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
            assert_eq!((r["id"].to_string(), r["error"]["code"].as_i64()), (id.to_string(), Some(INVALID_REQUEST)), "{id}");
        }
        assert_eq!(reply(r#"[{"jsonrpc":"2.0","id":3,"method":"ping"}]"#)[0]["id"], 3);
        for ok in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"status"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
            "",
        ] {
            assert_eq!(check_line(ok), Verdict::Pass, "{ok}");
        }
    }
}
