//! The client side of `DIR/argus.sock`: connect (or learn that no job runs there), send a
//! request line, read its response line.

use super::protocol::{read_response, Failure};
use super::SOCKET;
use anyhow::{Context, Result};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// A connection to a running job.
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

/// Whether a job answers in a directory.
pub enum Connect {
    /// It does.
    Job(Client),
    /// It does not: why (no socket, or nobody listening on it).
    NoJob(String),
}

/// Connects to the job serving `dir`. No socket, or a socket nobody listens on (a job
/// killed with `kill -9`): [`Connect::NoJob`]. Any other failure (permissions) is an error.
pub fn connect(dir: &Path) -> Result<Connect> {
    let path = dir.join(SOCKET);
    match UnixStream::connect(&path) {
        Ok(s) => Ok(Connect::Job(Client::new(s)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(Connect::NoJob(format!("no {SOCKET}")))
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(Connect::NoJob(format!(
            "nobody listens on {SOCKET}: the job has stopped"
        ))),
        Err(e) => Err(e).with_context(|| {
            format!(
                "connecting to {} (the socket is its job's user's only: run as that user)",
                path.display()
            )
        }),
    }
}

impl Client {
    /// A client on a connected stream.
    pub fn new(stream: UnixStream) -> Result<Client> {
        let writer = stream.try_clone().context("cloning the socket")?;
        Ok(Client {
            reader: BufReader::new(stream),
            writer,
            next_id: 1,
        })
    }

    /// Sends `op` with `params` (a JSON object's fields) and reads the answer: the result,
    /// or the job's error (outer error: the connection failed).
    pub fn request(
        &mut self,
        op: &str,
        params: Value,
    ) -> Result<std::result::Result<Value, Failure>> {
        let id = self.next_id;
        self.next_id += 1;
        let mut req = match params {
            Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        req.insert("v".into(), Value::from(super::protocol::VERSION));
        req.insert("id".into(), Value::from(id));
        req.insert("op".into(), Value::from(op));
        let mut line = Value::Object(req).to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .context("sending a request to the job")?;
        let mut answer = String::new();
        let n = self
            .reader
            .read_line(&mut answer)
            .context("reading the job's answer")?;
        anyhow::ensure!(n > 0, "the job closed the connection");
        Ok(read_response(answer.trim_end()))
    }
}
