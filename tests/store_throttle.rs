//! A store that throttles: a loopback S3 endpoint that answers 503 SlowDown (with S3's XML
//! error body) to the first requests for an object. The read is retried with backoff per
//! `STOKE_STORE_RETRIES`; when the store keeps throttling, the error names the object and says
//! it was throttled. The throttling server is a few lines on a thread here: neither moto nor
//! s3s-fs can be told to throttle. Its own test binary: the endpoint is process-wide.
#![cfg(feature = "remote")]

mod store_common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use stoke::source::remote::Store;

/// Requests seen per object path; `/throttle/twice` is throttled twice, anything else always.
struct Throttler {
    twice: AtomicUsize,
    always: AtomicUsize,
}

fn throttler() -> &'static Arc<Throttler> {
    static S: OnceLock<Arc<Throttler>> = OnceLock::new();
    S.get_or_init(|| {
        store_common::short_timeouts();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        std::env::set_var("AWS_ENDPOINT_URL", format!("http://{}", l.local_addr().unwrap()));
        let t = Arc::new(Throttler { twice: AtomicUsize::new(0), always: AtomicUsize::new(0) });
        let t2 = t.clone();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut line = String::new();
                r.read_line(&mut line).unwrap_or(0);
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                let n = if line.contains("/throttle/twice") { t2.twice.fetch_add(1, Ordering::SeqCst) } else {
                    t2.always.fetch_add(1, Ordering::SeqCst);
                    0
                };
                let resp = if line.contains("/throttle/twice") && n >= 2 {
                    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nETag: \"e1\"\r\nLast-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\nConnection: close\r\n\r\nhello".to_string()
                } else {
                    let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>1</RequestId></Error>";
                    format!("HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
                };
                let _ = c.write_all(resp.as_bytes());
            }
        });
        t
    })
}

fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).expect("the store call hung (or panicked)")
}

#[test]
fn a_store_that_always_answers_503_slowdown_is_retried_with_backoff_then_named_as_throttling() {
    let t = throttler();
    let start = Instant::now();
    let e = within(30, || Store::for_url("s3://throttle/always").unwrap().get("s3://throttle/always").unwrap_err().to_string());
    let took = start.elapsed();
    assert!(e.contains("s3://throttle/always") && e.contains("throttling"), "{e}");
    // STOKE_STORE_RETRIES=2 (store_common::short_timeouts): one try and two retries...
    assert_eq!(t.always.load(Ordering::SeqCst), 3, "{e}");
    // ...after backoffs of 100 ms and at least 100 ms more.
    assert!(took >= Duration::from_millis(190), "no backoff: {took:?}");
}

#[test]
fn a_store_that_answers_503_slowdown_twice_then_the_object_gives_the_object() {
    let t = throttler();
    let got = within(30, || Store::for_url("s3://throttle/twice").unwrap().get("s3://throttle/twice").map(|b| b.to_vec()));
    assert_eq!(got.unwrap(), b"hello");
    assert_eq!(t.twice.load(Ordering::SeqCst), 3);
}
