# shellcheck shell=bash
# tests/lib/pki.sh - throwaway certificates for the TLS tests (source after
# tests/lib/common.sh; needs openssl): PKI is $WORK/pki, made here.
#   ca NAME             a self-signed CA, $PKI/NAME.crt and .key
#   leaf NAME CA [SAN]  a certificate signed by CA, subjectAltName SAN
#                       (default DNS:NAME), $PKI/NAME.crt and .key
PKI=$WORK/pki
mkdir -p "$PKI"
ca() { openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1" -keyout "$PKI/$1.key" -out "$PKI/$1.crt" 2>/dev/null; }
leaf() {
	openssl req -newkey rsa:2048 -nodes -subj "/CN=$1" -keyout "$PKI/$1.key" -out "$PKI/$1.csr" 2>/dev/null
	printf 'subjectAltName=%s\n' "${3:-DNS:$1}" >"$PKI/$1.ext"
	openssl x509 -req -in "$PKI/$1.csr" -CA "$PKI/$2.crt" -CAkey "$PKI/$2.key" -CAcreateserial -days 2 \
		-extfile "$PKI/$1.ext" -out "$PKI/$1.crt" 2>/dev/null
}
