"""A private certificate authority for tests: a CA file to trust and a server certificate
for 127.0.0.1 signed by it (a GitHub Enterprise Server with a self-signed certificate)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class PrivateCA:
    ca_file: Path  # the CA certificate (PEM): what SSL_CERT_FILE names
    cert_file: Path
    key_file: Path

    def server_spki_sha256(self) -> str:
        """The server key's pin as chromium's --ignore-certificate-errors-spki-list takes it."""
        cert = x509.load_pem_x509_certificate(self.cert_file.read_bytes())
        spki = cert.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return base64.b64encode(hashlib.sha256(spki).digest()).decode()

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def private_ca(folder: Path) -> PrivateCA:
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    valid = {
        "not_valid_before": now - dt.timedelta(days=1),
        "not_valid_after": now + dt.timedelta(days=2),
    }
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "PR Cockpit test CA")])
    ca = (
        x509.CertificateBuilder(subject_name=ca_name, issuer_name=ca_name, **valid)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder(
            subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]),
            issuer_name=ca_name,
            **valid,
        )
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    found = PrivateCA(folder / "ca.pem", folder / "server.pem", folder / "server.key")
    found.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    found.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    found.key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return found
