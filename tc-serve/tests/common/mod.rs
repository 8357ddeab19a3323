//! Helpers shared by tc-serve's tests: where the models are (fetched on
//! first use), a minimal HTTP/1.1 client on `std::net::TcpStream` (so
//! malformed, slow and abandoned requests can be sent as they are), SSE
//! parsing, and the server binary spawned as a process.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;

/// The workspace root (tc-serve's manifest is one folder below it).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Run a fetch script once per process (each script publishes its files
/// atomically, so parallel test processes see all or nothing).
fn fetch(script: &str, present: &Path) -> Result<(), String> {
    static FETCH: Mutex<()> = Mutex::new(());
    let _one = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    if present.exists() {
        return Ok(());
    }
    let status = Command::new("bash")
        .arg(root().join("scripts").join(script))
        .status()
        .map_err(|e| e.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("scripts/{script} failed"))
    }
}

/// all-MiniLM-L6-v2's folder (`$TC_MINILM_DIR` or `models/all-MiniLM-L6-v2`).
pub fn minilm_dir() -> Result<PathBuf, String> {
    let dir = std::env::var_os("TC_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("models/all-MiniLM-L6-v2"));
    fetch("fetch-minilm.sh", &dir.join("model.safetensors"))?;
    Ok(dir)
}

/// SmolLM2-135M-Instruct's Q4_1 GGUF.
pub fn smollm2_path() -> PathBuf {
    let path = tc_serve::llama::model::default_model_path();
    fetch("fetch-smollm2.sh", &path).expect("fetch the SmolLM2 GGUF");
    path
}

/// An HTTP reply.
pub struct Reply {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// Send raw header lines and body; read the whole reply (`Connection: close`).
pub fn raw_at(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra_headers: &str,
    body: &[u8],
) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(600)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra_headers}\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).expect("read reply");
    parse_reply(buf)
}

pub fn parse_reply(buf: Vec<u8>) -> Reply {
    let text = String::from_utf8(buf).expect("utf-8 reply");
    let (headers, body) = text.split_once("\r\n\r\n").expect("header/body separator");
    let status = headers
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    let body = if headers
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Reply {
        status,
        headers: headers.to_string(),
        body,
    }
}

pub fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest.get(n + 2..).unwrap_or("");
    }
    out
}

pub fn get_at(addr: SocketAddr, path: &str) -> Reply {
    raw_at(addr, "GET", path, "", b"")
}

pub fn post_at(addr: SocketAddr, path: &str, body: &str) -> Reply {
    let h = format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    raw_at(addr, "POST", path, &h, body.as_bytes())
}

/// The `data:` payloads of an SSE body, `[DONE]` included as a string.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|ev| ev.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// A gauge or counter's value in Prometheus text.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
}

/// The tc-serve binary, run as a process on an ephemeral port.
pub struct Process {
    pub child: Child,
    pub addr: SocketAddr,
    /// Every stderr line (the logs), collected by a thread.
    pub log: std::sync::Arc<Mutex<Vec<String>>>,
}

impl Process {
    /// Start `tc-serve --port 0 <args>` and wait for its "listening" line.
    pub fn spawn(args: &[&str]) -> Process {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tc-serve"))
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tc-serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = std::sync::Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("listening on http://") {
                    let _ = tx.send(line[at + "listening on http://".len()..].trim().to_string());
                }
                l.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(a) => a.parse().expect("listening address"),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "tc-serve did not start:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        Process { child, addr, log }
    }

    /// Send a signal to the process (`kill -<sig> <pid>`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    pub fn logs(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
