//! Shards in object storage: `s3://bucket/prefix/…`, `gs://bucket/…`, `http(s)://host/…`,
//! read through [`object_store`] on a small tokio runtime of our own, with blocking calls for
//! the reader threads.
//!
//! # Credentials and endpoints
//! Each store reads its usual environment, as its own tools do:
//! - S3: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`
//!   (or `AWS_DEFAULT_REGION`), `AWS_ENDPOINT_URL` (as boto3 and the AWS CLI read it) for an
//!   S3-compatible server. Requests are path-style. Plain `http://` is allowed when the
//!   endpoint says `http://` (a local MinIO or moto) or `AWS_ALLOW_HTTP=true`.
//! - GCS: `GOOGLE_SERVICE_ACCOUNT` / `GOOGLE_APPLICATION_CREDENTIALS` and the rest of
//!   object_store's `GOOGLE_*` keys.
//! - HTTP(S): no credentials; the server must answer `Range` requests. HTTP cannot list, so a
//!   shard set there is a brace pattern or a single `.tar`.
//!
//! # Timeouts, retries, errors
//! Every request has a timeout (`STOKE_STORE_TIMEOUT`, seconds, default 30; connecting:
//! `STOKE_STORE_CONNECT_TIMEOUT`, default 5) and transient failures (connection refused or
//! reset, 5xx, timeouts) are retried with exponential backoff up to `STOKE_STORE_RETRIES` times
//! (default 3), all within `STOKE_STORE_RETRY_TIMEOUT` seconds (default 60). On top of that,
//! each call is cut off after the whole retry budget, so a store that stops answering gives an
//! error, never a hang. Errors name the object's URL, the operation and what was tried.

use crate::error::{Error, Result};
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjPath;
use object_store::{BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, PutPayload, RetryConfig};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// One object as a listing or a HEAD request reports it.
#[derive(Clone, Debug)]
pub struct Object {
    /// Full URL.
    pub url: String,
    /// Size in bytes.
    pub size: u64,
    /// ETag, or the modification time where the store gives no ETag: what the index's
    /// fingerprint keys on.
    pub version: String,
}

/// How requests are bounded; from the environment (module docs).
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// Per request.
    pub timeout: Duration,
    /// Per connection attempt.
    pub connect_timeout: Duration,
    /// Retries of a transient failure.
    pub retries: usize,
    /// All tries of one request together.
    pub retry_timeout: Duration,
}

fn env_secs(name: &str, default: f64) -> Result<Duration> {
    match std::env::var(name) {
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
            _ => Err(Error::config(format!("{name} must be a positive number of seconds, got {v:?}"))),
        },
        Err(_) => Ok(Duration::from_secs_f64(default)),
    }
}

impl Policy {
    /// The policy the environment asks for (module docs), with its defaults.
    pub fn from_env() -> Result<Self> {
        let retries = match std::env::var("STOKE_STORE_RETRIES") {
            Ok(v) => v.trim().parse().map_err(|_| Error::config(format!("STOKE_STORE_RETRIES must be a count, got {v:?}")))?,
            Err(_) => 3,
        };
        Ok(Self {
            timeout: env_secs("STOKE_STORE_TIMEOUT", 30.0)?,
            connect_timeout: env_secs("STOKE_STORE_CONNECT_TIMEOUT", 5.0)?,
            retries,
            retry_timeout: env_secs("STOKE_STORE_RETRY_TIMEOUT", 60.0)?,
        })
    }

    /// What was tried, for messages.
    fn tried(&self) -> String {
        format!(
            "up to {} tries with backoff, {:.3}s timeout per request, {:.3}s in all",
            self.retries + 1,
            self.timeout.as_secs_f64(),
            self.retry_timeout.as_secs_f64()
        )
    }

    /// The hard limit on one call: every try's timeout plus the backoff between them, capped
    /// by the retry budget plus one request.
    fn call_limit(&self) -> Duration {
        let tries = self.timeout.saturating_mul(self.retries as u32 + 1) + self.connect_timeout;
        tries.min(self.retry_timeout + self.timeout + self.connect_timeout)
    }
}

/// A store for one bucket (or HTTP origin) and the runtime its requests run on.
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Runtime,
    /// `s3://bucket`, `gs://bucket`, `https://host:port`: what object paths are relative to.
    base: String,
    policy: Policy,
    /// GET requests made (whole and ranged), for tests and reports.
    gets: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("base", &self.base).field("policy", &self.policy).finish()
    }
}

/// `scheme://authority` and the rest (without its leading `/`).
fn split_url(url: &str) -> Option<(&str, &str)> {
    let after = url.find("://")? + 3;
    let slash = url[after..].find('/').map(|i| after + i).unwrap_or(url.len());
    if slash == after {
        return None;
    }
    Some((&url[..slash], url.get(slash + 1..).unwrap_or("")))
}

impl Store {
    /// The store holding `url`, configured from the environment (module docs).
    pub fn for_url(url: &str) -> Result<Store> {
        let bad = |m: String| Error::dataset(Path::new(url), m);
        let (base, _) = split_url(url).ok_or_else(|| bad("not a store URL: expected scheme://bucket/key".into()))?;
        let policy = Policy::from_env()?;
        let scheme = base[..base.find("://").unwrap_or(0)].to_ascii_lowercase();
        let endpoint = std::env::var("AWS_ENDPOINT_URL").or_else(|_| std::env::var("AWS_ENDPOINT")).unwrap_or_default();
        let allow_http = scheme == "http"
            || (scheme == "s3" && endpoint.to_ascii_lowercase().starts_with("http://"))
            || std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
        let client =
            ClientOptions::new().with_timeout(policy.timeout).with_connect_timeout(policy.connect_timeout).with_allow_http(allow_http);
        let retry = RetryConfig {
            backoff: BackoffConfig { init_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(5), base: 2.0 },
            max_retries: policy.retries,
            retry_timeout: policy.retry_timeout,
        };
        let bucket = &base[scheme.len() + 3..];
        let inner: Arc<dyn ObjectStore> = match scheme.as_str() {
            "s3" => {
                let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                if !endpoint.is_empty() {
                    b = b.with_endpoint(&endpoint);
                }
                if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
                    b = b.with_region("us-east-1");
                }
                Arc::new(b.with_client_options(client).with_retry(retry).build().map_err(|e| bad(format!("cannot configure S3: {e}")))?)
            }
            "gs" => Arc::new(
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_bucket_name(bucket)
                    .with_client_options(client)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| bad(format!("cannot configure GCS: {e}")))?,
            ),
            _ => Arc::new(
                object_store::http::HttpBuilder::new()
                    .with_url(base)
                    .with_client_options(client)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| bad(format!("cannot configure HTTP: {e}")))?,
            ),
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("stoke-store")
            .enable_all()
            .build()
            .map_err(|e| bad(format!("cannot start the store's runtime: {e}")))?;
        Ok(Store { inner, rt, base: base.to_string(), policy, gets: Default::default() })
    }

    /// The request policy in force.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// GET requests made so far (whole objects and ranges; retries inside one call not counted).
    pub fn gets(&self) -> u64 {
        self.gets.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count_get(&self) {
        self.gets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn key(&self, url: &str) -> Result<ObjPath> {
        let rest = url.strip_prefix(self.base.as_str()).map(|r| r.trim_matches('/'));
        let rest = rest.ok_or_else(|| Error::dataset(Path::new(url), format!("not in the store {}", self.base)))?;
        ObjPath::parse(rest).map_err(|e| Error::dataset(Path::new(url), format!("not a valid object path: {e}")))
    }

    fn url_of(&self, key: &ObjPath) -> String {
        format!("{}/{}", self.base, key)
    }

    /// Run one store call with the hard limit of [`Policy::call_limit`]; errors name `url`,
    /// `what` and what was tried.
    fn run<T>(&self, url: &str, what: &str, fut: impl std::future::Future<Output = object_store::Result<T>>) -> Result<T> {
        let limit = self.policy.call_limit();
        match self.rt.block_on(async { tokio::time::timeout(limit, fut).await }) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Error::dataset(Path::new(url), format!("{what} failed ({}): {}", self.policy.tried(), describe(&e)))),
            Err(_) => Err(Error::dataset(
                Path::new(url),
                format!("{what} gave no answer within {:.3}s ({}): the store stopped answering", limit.as_secs_f64(), self.policy.tried()),
            )),
        }
    }

    /// Size and version of one object.
    pub fn head(&self, url: &str) -> Result<Object> {
        let key = self.key(url)?;
        let m = self.run(url, "HEAD", self.inner.head(&key))?;
        Ok(Object { url: url.to_string(), size: m.size, version: version(&m) })
    }

    /// HEAD of many objects, a few at a time (HTTP stores cannot list).
    pub fn head_all(&self, urls: &[String]) -> Result<Vec<Object>> {
        let keys: Vec<ObjPath> = urls.iter().map(|u| self.key(u)).collect::<Result<_>>()?;
        let all = urls.first().map(String::as_str).unwrap_or(&self.base);
        let inner = &self.inner;
        let metas = self.run(all, "HEAD of each shard", async {
            futures::stream::iter(keys.iter().map(|k| inner.head(k))).buffered(16).try_collect::<Vec<_>>().await
        });
        match metas {
            Ok(ms) => Ok(ms.iter().zip(urls).map(|(m, u)| Object { url: u.clone(), size: m.size, version: version(m) }).collect()),
            // Name the object that failed: ask again one at a time.
            Err(e) => {
                for u in urls {
                    self.head(u)?;
                }
                Err(e)
            }
        }
    }

    /// Every object under `prefix_url` (a "folder": `s3://bucket/some/prefix/`), sorted.
    pub fn list(&self, prefix_url: &str) -> Result<Vec<Object>> {
        let key = self.key(prefix_url)?;
        let prefix = (!key.as_ref().is_empty()).then_some(&key);
        let inner = &self.inner;
        let metas = self.run(prefix_url, "LIST", async { inner.list(prefix).try_collect::<Vec<_>>().await })?;
        let mut out: Vec<Object> =
            metas.iter().map(|m| Object { url: self.url_of(&m.location), size: m.size, version: version(m) }).collect();
        out.sort_by(|a, b| a.url.cmp(&b.url));
        Ok(out)
    }

    /// The shards `url` names and the "folder" they sit in (where `classes.txt` is looked
    /// for): a brace pattern (`…/shard-{000..127}.tar`), one `.tar`, or a prefix whose `.tar`
    /// objects are the shards (S3 and GCS; HTTP cannot list). A shard the pattern names that
    /// is not there is an error naming it.
    pub fn shards(&self, url: &str) -> Result<(String, Vec<Object>)> {
        let bad = |m: String| Error::dataset(Path::new(url), m);
        let http = self.base.starts_with("http");
        let is_tar = |u: &str| u.len() > 4 && u[u.len() - 4..].eq_ignore_ascii_case(".tar");
        if url.contains('{') {
            let names = super::tar::expand_braces(url).map_err(bad)?;
            // The folder is what comes before the first brace's last slash.
            let dir = &url[..url[..url.find('{').unwrap_or(0)].rfind('/').map(|i| i + 1).unwrap_or(0)];
            let objects = if http {
                self.head_all(&names)?
            } else {
                let listed: std::collections::HashMap<String, Object> = self.list(dir)?.into_iter().map(|o| (o.url.clone(), o)).collect();
                let mut out = Vec::with_capacity(names.len());
                for n in &names {
                    match listed.get(n) {
                        Some(o) => out.push(o.clone()),
                        None => return Err(Error::dataset(Path::new(n), format!("shard named by the pattern {url:?} does not exist"))),
                    }
                }
                out
            };
            return Ok((dir.trim_end_matches('/').to_string(), objects));
        }
        if is_tar(url) {
            let dir = &url[..url.rfind('/').unwrap_or(0)];
            return Ok((dir.to_string(), vec![self.head(url)?]));
        }
        if http {
            return Err(bad(
                "an HTTP server cannot list its files: name the shards with a brace pattern (shard-{0000..0127}.tar) or one .tar".into(),
            ));
        }
        let dir = format!("{}/", url.trim_end_matches('/'));
        let shards: Vec<Object> = self.list(&dir)?.into_iter().filter(|o| is_tar(&o.url) && !o.url[dir.len()..].contains('/')).collect();
        if shards.is_empty() {
            return Err(bad("empty dataset: no .tar shards found under this prefix".into()));
        }
        Ok((dir.trim_end_matches('/').to_string(), shards))
    }

    /// Bytes `range` of an object (one ranged GET).
    pub fn get_range(&self, url: &str, range: Range<u64>) -> Result<Bytes> {
        let key = self.key(url)?;
        let what = format!("GET of bytes {}..{}", range.start, range.end);
        let want = range.end - range.start;
        let inner = &self.inner;
        self.count_get();
        let b = self.run(url, &what, async {
            let opts = GetOptions { range: Some(GetRange::Bounded(range)), ..Default::default() };
            inner.get_opts(&key, opts).await?.bytes().await
        })?;
        if b.len() as u64 != want {
            return Err(Error::dataset(Path::new(url), format!("{what}: the store returned {} bytes, expected {want}", b.len())));
        }
        Ok(b)
    }

    /// Byte ranges of objects, `in_flight` ranged GETs at once (at least 1), each as
    /// [`Self::get_range`] alone would give it (its own time limit, retries and error): the
    /// samples of a batch read concurrently rather than one after another.
    pub fn get_ranges(&self, reqs: &[(&str, Range<u64>)], in_flight: usize) -> Vec<Result<Bytes>> {
        let limit = self.policy.call_limit();
        let inner = &self.inner;
        let one = |(url, range): &(&str, Range<u64>)| {
            let (url, range) = (url.to_string(), range.clone());
            let key = self.key(&url);
            let what = format!("GET of bytes {}..{}", range.start, range.end);
            let want = range.end - range.start;
            self.count_get();
            async move {
                let key = key?;
                let opts = GetOptions { range: Some(GetRange::Bounded(range)), ..Default::default() };
                let got = tokio::time::timeout(limit, async { inner.get_opts(&key, opts).await?.bytes().await }).await;
                let b = match got {
                    Ok(Ok(b)) => b,
                    Ok(Err(e)) => {
                        return Err(Error::dataset(Path::new(&url), format!("{what} failed ({}): {}", self.policy.tried(), describe(&e))))
                    }
                    Err(_) => {
                        return Err(Error::dataset(
                            Path::new(&url),
                            format!(
                                "{what} gave no answer within {:.3}s ({}): the store stopped answering",
                                limit.as_secs_f64(),
                                self.policy.tried()
                            ),
                        ))
                    }
                };
                if b.len() as u64 != want {
                    return Err(Error::dataset(Path::new(&url), format!("{what}: the store returned {} bytes, expected {want}", b.len())));
                }
                Ok(b)
            }
        };
        self.rt.block_on(futures::stream::iter(reqs.iter().map(one)).buffered(in_flight.max(1)).collect::<Vec<_>>())
    }

    /// A whole object (one GET).
    pub fn get(&self, url: &str) -> Result<Bytes> {
        let key = self.key(url)?;
        let inner = &self.inner;
        self.count_get();
        self.run(url, "GET", async { inner.get(&key).await?.bytes().await })
    }

    /// A whole object (one GET) and the version the store gave with it (as [`Object::version`]):
    /// what the node cache checks against the listing.
    pub fn get_with_version(&self, url: &str) -> Result<(Bytes, String)> {
        let key = self.key(url)?;
        let inner = &self.inner;
        self.count_get();
        self.run(url, "GET", async {
            let r = inner.get(&key).await?;
            let v = version(&r.meta);
            Ok((r.bytes().await?, v))
        })
    }

    /// A whole object, or `None` when there is none (`classes.txt`, the shard facts).
    pub fn get_if_present(&self, url: &str) -> Result<Option<Bytes>> {
        let key = self.key(url)?;
        let inner = &self.inner;
        self.count_get();
        let r = self
            .rt
            .block_on(async { tokio::time::timeout(self.policy.call_limit(), async { inner.get(&key).await?.bytes().await }).await });
        match r {
            Ok(Ok(b)) => Ok(Some(b)),
            Ok(Err(object_store::Error::NotFound { .. })) => Ok(None),
            // Anything else again through `get`, for its error (naming what was tried).
            _ => self.get(url).map(Some),
        }
    }

    /// Write an object (one PUT; multipart for large ones).
    pub fn put(&self, url: &str, data: Bytes) -> Result<()> {
        let key = self.key(url)?;
        let inner = &self.inner;
        let n = data.len();
        if n <= 64 << 20 {
            self.run(url, &format!("PUT of {n} bytes"), async { inner.put(&key, PutPayload::from_bytes(data)).await }).map(|_| ())
        } else {
            self.run(url, &format!("multipart PUT of {n} bytes"), async {
                let mut up = inner.put_multipart(&key).await?;
                for part in (0..n).step_by(32 << 20) {
                    up.put_part(PutPayload::from_bytes(data.slice(part..(part + (32 << 20)).min(n)))).await?;
                }
                up.complete().await
            })
            .map(|_| ())
        }
    }
}

fn version(m: &object_store::ObjectMeta) -> String {
    m.e_tag.clone().unwrap_or_else(|| m.last_modified.to_rfc3339())
}

/// object_store's error in a sentence, with its source chain (the HTTP status, the server's
/// message, "connection refused").
fn describe(e: &object_store::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    // S3 answers 503 SlowDown (GCS and HTTP servers 429) when it throttles: say so, after the
    // retries with backoff have been spent on it (object_store keeps the status, not the body).
    if ["SlowDown", "429 Too Many Requests", "503 Service Unavailable"].iter().any(|t| s.contains(t)) {
        s.push_str(
            ": the store is throttling requests or overloaded (HTTP 503, S3's SlowDown, or 429): fewer requests at once (reader threads), or more retries and time (STOKE_STORE_RETRIES, STOKE_STORE_RETRY_TIMEOUT), let it recover",
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_store_and_key() {
        assert_eq!(split_url("s3://bucket/a/b.tar"), Some(("s3://bucket", "a/b.tar")));
        assert_eq!(split_url("http://127.0.0.1:8080/x"), Some(("http://127.0.0.1:8080", "x")));
        assert_eq!(split_url("gs://bucket"), Some(("gs://bucket", "")));
        assert_eq!(split_url("s3:///x"), None);
    }
}
