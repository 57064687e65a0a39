//! The secure `/metrics` endpoint's TLS, as controller-runtime's metrics server sets it up:
//! the certificate and key of a directory (`tls.crt`, `tls.key`: a mounted Secret, e.g. from
//! cert-manager; re-read when they change, as its certwatcher does), or else a self-signed
//! certificate made at start (Prometheus then scrapes with `insecure_skip_verify`). HTTP/1.1
//! only (controller-runtime turns HTTP/2 off on it).

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio_rustls::TlsAcceptor;

/// The files of a certificate directory, as a `kubernetes.io/tls` Secret names its keys.
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

/// How often a directory's files are looked at for a change (on a handshake).
const RELOAD_CHECK_EVERY: Duration = Duration::from_secs(10);

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Where the certificate comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// `tls.crt` and `tls.key` in this directory.
    Dir(PathBuf),
    /// Made now, for these names (DNS names or IP addresses).
    SelfSigned(Vec<String>),
}

/// A TLS acceptor serving the certificate of `source`.
pub fn acceptor(source: &Source) -> Result<TlsAcceptor, String> {
    let resolver: Arc<dyn ResolvesServerCert> = match source {
        Source::Dir(dir) => Arc::new(Watched::load(dir)?),
        Source::SelfSigned(names) => Arc::new(Fixed(Arc::new(self_signed(names)?))),
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn certified(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<CertifiedKey, String> {
    CertifiedKey::from_der(certs, key, &provider()).map_err(|e| e.to_string())
}

fn self_signed(names: &[String]) -> Result<CertifiedKey, String> {
    let made = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| format!("making a self-signed certificate: {e}"))?;
    let key = PrivatePkcs8KeyDer::from(made.signing_key.serialize_der());
    certified(vec![made.cert.der().clone()], key.into())
}

/// The certificate and key of `dir`.
fn read_dir(dir: &Path) -> Result<CertifiedKey, String> {
    let (cert, key) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
    let certs = CertificateDer::pem_file_iter(&cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&key).map_err(|e| format!("{}: {e}", key.display()))?;
    certified(certs, key).map_err(|e| format!("{}: {e}", dir.display()))
}

#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A directory's certificate, re-read when its files change (a renewed Secret).
#[derive(Debug)]
struct Watched {
    dir: PathBuf,
    state: Mutex<WatchedState>,
}

#[derive(Debug)]
struct WatchedState {
    served: Arc<CertifiedKey>,
    stamps: Vec<Option<SystemTime>>,
    checked: Instant,
}

impl Watched {
    fn load(dir: &Path) -> Result<Watched, String> {
        let stamps = stamps(dir);
        let served = Arc::new(read_dir(dir)?);
        Ok(Watched {
            dir: dir.to_path_buf(),
            state: Mutex::new(WatchedState {
                served,
                stamps,
                checked: Instant::now(),
            }),
        })
    }
}

/// When the files last changed (a Secret's volume swaps a symlink: the target's times count).
fn stamps(dir: &Path) -> Vec<Option<SystemTime>> {
    [CERT_FILE, KEY_FILE]
        .iter()
        .map(|f| {
            std::fs::metadata(dir.join(f))
                .and_then(|m| m.modified())
                .ok()
        })
        .collect()
}

impl ResolvesServerCert for Watched {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.checked.elapsed() >= RELOAD_CHECK_EVERY {
            state.checked = Instant::now();
            let now = stamps(&self.dir);
            if now != state.stamps {
                match read_dir(&self.dir) {
                    Ok(key) => {
                        tracing::info!(dir = %self.dir.display(), "metrics certificate reloaded");
                        state.served = Arc::new(key);
                        state.stamps = now;
                    }
                    // Half-written files: keep serving the old one and look again later.
                    Err(e) => tracing::warn!("metrics certificate not reloaded: {e}"),
                }
            }
        }
        Some(state.served.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_its_files_is_refused_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let e = acceptor(&Source::Dir(dir.path().to_path_buf()))
            .err()
            .expect("refused");
        assert!(e.contains("tls.crt"), "{e}");
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        std::fs::write(dir.path().join(CERT_FILE), made.cert.pem()).unwrap();
        let e = acceptor(&Source::Dir(dir.path().to_path_buf()))
            .err()
            .expect("refused");
        assert!(e.contains("tls.key"), "{e}");
        std::fs::write(dir.path().join(KEY_FILE), made.signing_key.serialize_pem()).unwrap();
        acceptor(&Source::Dir(dir.path().to_path_buf())).unwrap();
    }

    #[test]
    fn a_self_signed_certificate_is_made() {
        acceptor(&Source::SelfSigned(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
        ]))
        .unwrap();
    }
}
