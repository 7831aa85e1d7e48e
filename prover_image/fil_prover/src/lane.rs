//! The client side of the lane agent's line protocol (prover_image/kuzk_prover/lane_protocol.py):
//! one connection per call, one line out (`stage synthesizing`, `acquire`, `release-gpu`,
//! `result <json>`), one line back (`ok ...` or `error ...`).

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};

use crate::fail::{failed, one_line, Outcome};

/// The environment variable naming the agent's socket.
pub const SOCKET_ENV: &str = "KUZK_LANE_SOCKET";

/// The lane agent at one socket: a name starting with `@` is in Linux's abstract namespace,
/// anything else a path.
#[derive(Clone)]
pub struct Lane {
    name: String,
}

impl Lane {
    pub fn new(name: String) -> Lane {
        Lane { name }
    }

    /// Makes one call and returns the agent's note after `ok`; a failure (exit 1) with the
    /// agent's reason when it answers `error`, or when it cannot be reached.
    pub fn call(&self, line: &str) -> Outcome<String> {
        let reply = self.exchange(line).map_err(|error| {
            failed(format!(
                "{SOCKET_ENV} {}: `{}`: {error}",
                self.name,
                verb(line)
            ))
        })?;
        let (status, note) = reply.trim().split_once(' ').unwrap_or((reply.trim(), ""));
        match (status, note) {
            ("ok", _) => Ok(note.to_string()),
            ("error", reason) if !reason.is_empty() => Err(failed(format!(
                "the lane agent refused `{}`: {}",
                verb(line),
                one_line(reason)
            ))),
            _ => Err(failed(format!(
                "the lane agent answered `{}` with {:?}, not `ok` or `error ...`",
                verb(line),
                reply.trim()
            ))),
        }
    }

    fn exchange(&self, line: &str) -> std::io::Result<String> {
        let mut stream = self.connect()?;
        stream.write_all(format!("{}\n", one_line(line)).as_bytes())?;
        let mut reply = String::new();
        BufReader::new(stream).read_line(&mut reply)?;
        if reply.is_empty() {
            return Err(std::io::Error::other(
                "the agent closed the connection without a reply",
            ));
        }
        Ok(reply)
    }

    fn connect(&self) -> std::io::Result<UnixStream> {
        match self.name.strip_prefix('@') {
            Some(abstract_name) => {
                UnixStream::connect_addr(&SocketAddr::from_abstract_name(abstract_name.as_bytes())?)
            }
            None => UnixStream::connect(&self.name),
        }
    }
}

/// The call's verb and stage, without a result's JSON, for messages.
fn verb(line: &str) -> &str {
    line.strip_prefix("result ").map_or(line, |_| "result")
}
