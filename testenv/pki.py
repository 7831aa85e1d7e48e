"""Throwaway PKI for one test control plane: a CA, the apiserver's serving certificate, an
admin client certificate in ``system:masters`` and the service-account signing key pair."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_IP = "10.0.0.1"


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: object) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=7))
    )


def create(directory: Path) -> Pki:
    """Write a fresh PKI into ``directory`` and return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("kuzk-testenv-ca")
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, org: str | None, usage: x509.ObjectIdentifier,
             sans: list[x509.GeneralName] | None,
             ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = _key()
        b = _builder(_name(cn, org), ca_name, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return b.sign(ca_key, hashes.SHA256()), key

    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
           "kubernetes.default.svc.cluster.local"]
    serving, serving_key = leaf(
        "kube-apiserver", None, ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.DNSName(d) for d in dns]
        + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", SERVICE_IP)],
    )
    admin, admin_key = leaf("kuzk-admin", "system:masters", ExtendedKeyUsageOID.CLIENT_AUTH, None)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pki = Pki(
        ca_cert=directory / "ca.crt", ca_key=directory / "ca.key",
        serving_cert=directory / "apiserver.crt", serving_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt", admin_key=directory / "admin.key",
        sa_key=directory / "sa.key", sa_pub=directory / "sa.pub",
    )
    for path, cert in ((pki.ca_cert, ca), (pki.serving_cert, serving), (pki.admin_cert, admin)):
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.ca_key, ca_key)
    _write_key(pki.serving_key, serving_key)
    _write_key(pki.admin_key, admin_key)
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
