//! The service-account signing key, generated in process (no `openssl` needed), and the base64
//! both it and etcd's JSON gateway need.

use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};

use crate::Error;

/// The DER of a P-256 SubjectPublicKeyInfo before its 65-byte uncompressed point: the
/// algorithm `id-ecPublicKey` with the curve `prime256v1` (RFC 5480).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// A fresh ECDSA P-256 service-account key, as kube-apiserver takes it: the private key as
/// PKCS#8 PEM (`PRIVATE KEY`) for `--service-account-signing-key-file` (it signs ES256 tokens),
/// and its public half as PEM (`PUBLIC KEY`) for `--service-account-key-file` (which reads
/// private keys only in the RSA or SEC 1 forms).
pub(crate) fn service_account_key() -> Result<(String, String), Error> {
    let algorithm = &ECDSA_P256_SHA256_FIXED_SIGNING;
    let random = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(algorithm, &random).map_err(|_| Error::Key)?;
    let pair =
        EcdsaKeyPair::from_pkcs8(algorithm, pkcs8.as_ref(), &random).map_err(|_| Error::Key)?;
    let spki = [&P256_SPKI_PREFIX[..], pair.public_key().as_ref()].concat();
    Ok((pem("PRIVATE KEY", pkcs8.as_ref()), pem("PUBLIC KEY", &spki)))
}

/// `der` in PEM armour: base64 in lines of 64 characters (RFC 7468).
fn pem(label: &str, der: &[u8]) -> String {
    let body = base64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Standard base64 with padding (RFC 4648), as PEM and etcd's JSON gateway read it.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_should_match_rfc_4648_test_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
    }

    #[test]
    fn service_account_key_should_be_two_pem_blocks_in_64_character_lines() {
        let (private, public) = service_account_key().unwrap();
        for (pem, label) in [(private, "PRIVATE KEY"), (public, "PUBLIC KEY")] {
            let lines: Vec<_> = pem.lines().collect();
            assert_eq!(lines[0], format!("-----BEGIN {label}-----"));
            assert_eq!(lines[lines.len() - 1], format!("-----END {label}-----"));
            let body = &lines[1..lines.len() - 1];
            assert!(body[..body.len() - 1].iter().all(|l| l.len() == 64));
            assert!(body.iter().all(|l| !l.is_empty() && l.len() <= 64));
        }
    }

    #[test]
    fn the_public_key_should_be_a_p256_subject_public_key_info() {
        let (_, public) = service_account_key().unwrap();
        // 26 bytes of prefix and 65 of point: 91 bytes, 124 base64 characters in two lines.
        let body: String = public.lines().filter(|l| !l.starts_with("-----")).collect();
        assert_eq!(body.len(), 124);
        assert!(body.starts_with(&base64(&P256_SPKI_PREFIX[..24])));
    }
}
