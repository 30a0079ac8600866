#!/bin/bash
# SPDX-License-Identifier: MIT
# Throwaway certificates for the TLS tests: a CA, a coordinator certificate
# naming its address (IP SAN), one certificate per node (CN and DNS SAN =
# the node name), and a second CA ("rogue") with a certificate of its own
# for the first node's name, which nobody trusts. Keys are EC P-256, valid a
# day, made with the openssl command into DIR (which must exist).
#   mkcerts.sh DIR COORD_IP NODE...
set -eu
dir=$1 coord_ip=$2
shift 2
cd "$dir"
days=1
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

ca() { # NAME
	openssl req -x509 "${ec[@]}" -keyout "$1.key" -out "$1.crt" -days "$days" \
		-subj "/CN=leaseline test $1" -addext basicConstraints=critical,CA:TRUE \
		-addext keyUsage=critical,keyCertSign 2>/dev/null
}

leaf() { # CA NAME SAN
	openssl req "${ec[@]}" -keyout "$2.key" -out "$2.csr" -subj "/CN=$2" 2>/dev/null
	printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" >"$2.ext"
	openssl x509 -req -in "$2.csr" -CA "$1.crt" -CAkey "$1.key" -CAcreateserial \
		-out "$2.crt" -days "$days" -extfile "$2.ext" 2>/dev/null
	rm -f "$2.csr" "$2.ext"
}

ca ca
ca rogue-ca
leaf ca coord "IP:$coord_ip"
for n in "$@"; do
	leaf ca "$n" "DNS:$n"
done
leaf rogue-ca rogue "DNS:${1:-gw-1}"
chmod 600 ./*.key
