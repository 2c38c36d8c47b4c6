//! TLS between replicas: a peer must serve this replica's own certificate, which this replica
//! presents in turn.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::CertificateDer;

use super::certs::ReloadingCert;
use super::Tls;

impl Tls {
    /// Connections to another replica's listener (ALPN `alpn`): the peer must present the
    /// very certificate this replica serves, proving it holds the same key (every replica
    /// mounts the same Secret), so pod IPs need no place in the certificate; this replica
    /// presents it too, for a peer under mutual TLS (whose client CA must then have issued
    /// it, with the `clientAuth` usage).
    pub fn peer_connector(&self, alpn: &[u8]) -> tokio_rustls::TlsConnector {
        let verifier = Arc::new(SameCert { ours: self.resolver.clone(), provider: self.provider.clone() });
        let mut config = rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_cert_resolver(Arc::new(PresentOurs(self.resolver.clone())));
        config.alpn_protocols = vec![alpn.to_vec()];
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }
}

/// Accepts a server certificate only when it is the one this replica serves (re-read as the
/// files change), and its handshake signature verifies, proving the peer holds the key.
#[derive(Debug)]
struct SameCert {
    ours: Arc<ReloadingCert>,
    provider: Arc<CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for SameCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        match self.ours.current().cert.first() {
            Some(ours) if ours.as_ref() == end_entity.as_ref() => Ok(rustls::client::danger::ServerCertVerified::assertion()),
            _ => Err(rustls::Error::General(
                "the other replica serves a different certificate than this one (replicas share one; mid-rotation, retry)".into(),
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The serving pair, presented as this replica's client certificate.
#[derive(Debug)]
struct PresentOurs(Arc<ReloadingCert>);

impl rustls::client::ResolvesClientCert for PresentOurs {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[rustls::SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}
