//! Real servers on loopback for the object-store tests, started by the tests themselves: two
//! S3-compatible servers (moto's server mode, `moto_server` from PyPI's `moto[server]`; s3s-fs
//! from crates.io, backed by a folder) and an HTTP server with range support (nginx). Nothing
//! in-process stands in for a store.
//!
//! A test whose server binary is missing prints why and returns, unless `STOKE_REQUIRE_STORE=1`
//! (CI sets it after installing both), where it fails.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Request limits for every test in a binary: short, so the failure tests finish quickly. Set
/// once, before any store is opened (all tests of a binary share the process environment).
pub fn short_timeouts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for (k, v) in [
            ("STOKE_STORE_TIMEOUT", "2"),
            ("STOKE_STORE_CONNECT_TIMEOUT", "1"),
            ("STOKE_STORE_RETRIES", "2"),
            ("STOKE_STORE_RETRY_TIMEOUT", "4"),
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_REGION", "us-east-1"),
        ] {
            std::env::set_var(k, v);
        }
    });
}

/// The binary, or `None` after printing why the test is skipped (a failure when
/// `STOKE_REQUIRE_STORE=1`).
pub fn find(binary: &str, test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| std::env::split_paths(&paths).map(|d| d.join(binary)).find(|p| p.is_file()));
    let found = found.or_else(|| ["/usr/sbin", "/usr/local/sbin"].iter().map(|d| Path::new(d).join(binary)).find(|p| p.is_file()));
    if found.is_none() {
        let why = format!(
            "{test}: skipped: {binary} is not installed (pip install 'moto[server]'; apt-get install nginx; cargo install s3s-fs --version 0.14.1 --features binary)"
        );
        assert!(std::env::var("STOKE_REQUIRE_STORE").as_deref() != Ok("1"), "{why}, and STOKE_REQUIRE_STORE=1");
        eprintln!("{why}");
    }
    found
}

/// A free loopback port (bound and released; the server binds it next).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn wait_listening(port: u16, child: &mut Child, what: &str) {
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before listening on port {port}: {status}");
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{what} not listening on port {port} after 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A server process, killed when dropped (or by [`Server::kill`] mid-test).
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    _dir: Option<tempfile::TempDir>,
}

/// Start `c` as a server: in a process group of its own (nginx's workers too), killed with the
/// group when the [`Server`] is dropped or killed, and at the test process's exit for servers
/// kept in statics (which Rust never drops): a test run leaves no server behind.
fn spawn_server(c: &mut Command, what: &str) -> Child {
    use std::os::unix::process::CommandExt;
    static LIVE: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());
    extern "C" fn kill_live() {
        if let Ok(live) = LIVE.lock() {
            for &pid in live.iter() {
                // SAFETY: signals the process group this binary started (pid = group id).
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
        }
    }
    static AT_EXIT: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain extern "C" function with no captured state.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(kill_live);
    });
    let child = c.process_group(0).spawn().unwrap_or_else(|e| panic!("start {what}: {e}"));
    LIVE.lock().unwrap_or_else(|p| p.into_inner()).push(child.id() as i32);
    child
}

impl Server {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stop the server now (SIGKILL to its process group), as a crashed store would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: signals the process group spawn_server made for this child.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// moto's S3 server on a free loopback port. With `auth`, it checks credentials (so every key
/// the tests use is wrong); without, it accepts any.
pub fn moto(test: &str, auth: bool) -> Option<Server> {
    let bin = find("moto_server", test)?;
    let port = free_port();
    let mut c = Command::new(bin);
    c.args(["-H", "127.0.0.1", "-p", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
    if auth {
        c.env("INITIAL_NO_AUTH_ACTION_COUNT", "0");
    }
    let mut child = spawn_server(&mut c, "moto_server");
    wait_listening(port, &mut child, "moto_server");
    Some(Server { child: Some(child), port, _dir: None })
}

/// s3s-fs (crates.io: `cargo install s3s-fs --version 0.14.1 --features binary`), a second
/// S3-compatible server, backed by a folder: buckets are its subfolders (made here, before
/// start), credentials `testing`/`testing` checked on every request.
pub fn s3s_fs(test: &str, buckets: &[&str]) -> Option<Server> {
    let bin = find("s3s-fs", test)?;
    let dir = tempfile::tempdir().unwrap();
    for b in buckets {
        std::fs::create_dir_all(dir.path().join(b)).unwrap();
    }
    let port = free_port();
    let mut child = spawn_server(
        Command::new(bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--access-key", "testing", "--secret-key", "testing"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "s3s-fs",
    );
    wait_listening(port, &mut child, "s3s-fs");
    Some(Server { child: Some(child), port, _dir: Some(dir) })
}

/// One plain HTTP/1.1 request to a loopback server (bucket creation, which the store API has
/// no call for); returns the status code.
pub fn http(port: u16, method: &str, path: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Create `bucket` on an S3 server.
pub fn make_bucket(server: &Server, bucket: &str) {
    let code = http(server.port, "PUT", &format!("/{bucket}"));
    assert_eq!(code, 200, "create bucket {bucket}");
}

/// Point the S3 client at `server` (AWS_ENDPOINT_URL, as boto3 reads it). Every S3 test of a
/// binary uses the same server, started once by [`shared_moto`].
pub fn use_endpoint(server: &Server) {
    std::env::set_var("AWS_ENDPOINT_URL", server.url());
}

/// nginx serving `root` on a free loopback port: `/` at full speed, `/slow/` at 1 KiB/s (a
/// server that answers, then crawls). nginx's `limit_rate` lets a response have
/// (seconds since its start + 1) × rate bytes, so at 4 KiB/s a 10 KiB shard was whole just
/// inside a 2 s timeout now and then; at 1 KiB/s it needs about 9 s.
pub fn nginx(test: &str, root: &Path) -> Option<Server> {
    let bin = find("nginx", test)?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let conf = dir.path().join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "daemon off;\nworker_processes 1;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d};\n  proxy_temp_path {d};\n  fastcgi_temp_path {d};\n  uwsgi_temp_path {d};\n  scgi_temp_path {d};\n\
               server {{\n    listen 127.0.0.1:{port};\n    root {root};\n    location /slow/ {{ alias {root}/; limit_rate 1k; }}\n  }}\n}}\n",
            d = dir.path().display(),
            root = root.display()
        ),
    )
    .unwrap();
    let mut child = spawn_server(
        Command::new(bin)
            .args(["-c", &conf.to_string_lossy(), "-p", &dir.path().to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "nginx",
    );
    wait_listening(port, &mut child, "nginx");
    Some(Server { child: Some(child), port, _dir: Some(dir) })
}
