#!/usr/bin/env bash
# Writes a small PKI: a CA, a server certificate for localhost / 127.0.0.1 (and the extra names given) and a client
# certificate (mTLS), all signed by the CA, valid for 100 years.
#   scripts/gen-test-certs.sh                      the test-only PKI of test/fixtures/tls (it protects nothing: the TLS
#                                                  tests use it so they need no key generation at test time)
#   scripts/gen-test-certs.sh certs temporal       a PKI for docker-compose.yml (server name "temporal") in ./certs
# For anything beyond a local stack, use certificates from your own CA.
set -euo pipefail
out="${1:-$(dirname "$0")/../test/fixtures/tls}"
shift || true
extra=""
for name in "$@"; do extra="$extra,DNS:$name"; done
mkdir -p "$out"
cd "$out"
days=36500
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days $days \
  -subj "/CN=cm2 test CA" -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
issue() { # name, subject, extensions
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$1.pem" -days $days -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
issue server "/CN=localhost" "subjectAltName=DNS:localhost,IP:127.0.0.1$extra
extendedKeyUsage=serverAuth
keyUsage=critical,digitalSignature,keyEncipherment"
issue client "/CN=cm2-test-client" "extendedKeyUsage=clientAuth
keyUsage=critical,digitalSignature,keyEncipherment"
# A second CA, never trusted by the servers: a client certificate it signs must be refused.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout other-ca.key -out other-ca.pem -days $days \
  -subj "/CN=cm2 untrusted CA" -addext "basicConstraints=critical,CA:TRUE" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout untrusted-client.key -out u.csr -subj "/CN=intruder" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > u.ext
openssl x509 -req -in u.csr -CA other-ca.pem -CAkey other-ca.key -CAcreateserial -out untrusted-client.pem -days $days -extfile u.ext 2>/dev/null
rm -f u.csr u.ext ./*.srl other-ca.key ca.key
chmod 644 ./*.key
ls
