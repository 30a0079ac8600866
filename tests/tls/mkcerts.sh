#!/bin/bash
# SPDX-License-Identifier: MIT
# Throwaway certificates for the TLS tests: a CA, a coordinator certificate
# naming its address (IP SAN, extendedKeyUsage serverAuth), one certificate
# per node (CN and DNS SAN = the node name, clientAuth), and a second CA
# ("rogue") with a certificate of its own for the first node's name, which
# nobody trusts. Also, from the first CA, the certificates a holder or a
# coordinator must be refused with: wild (DNS:*.gw.example), both
# (the first node's name and the coordinator's IP, with both EKUs),
# noeku (no extendedKeyUsage), cnonly (CN=gw-cn, only an IP SAN), gwip
# (a holder's certificate with the coordinator's IP) and pair (gw-3 and
# gw-4 on one certificate). Keys are EC P-256, valid a day, made with the
# openssl command into DIR (which must exist).
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

leaf() { # CA NAME SAN EKU [CN]
	openssl req "${ec[@]}" -keyout "$2.key" -out "$2.csr" -subj "/CN=${5:-$2}" 2>/dev/null
	printf 'subjectAltName=%s\n' "$3" >"$2.ext"
	[ -n "$4" ] && printf 'extendedKeyUsage=%s\n' "$4" >>"$2.ext"
	openssl x509 -req -in "$2.csr" -CA "$1.crt" -CAkey "$1.key" -CAcreateserial \
		-out "$2.crt" -days "$days" -extfile "$2.ext" 2>/dev/null
	rm -f "$2.csr" "$2.ext"
}

ca ca
ca rogue-ca
leaf ca coord "IP:$coord_ip" serverAuth
for n in "$@"; do
	leaf ca "$n" "DNS:$n" clientAuth
done
leaf rogue-ca rogue "DNS:${1:-gw-1}" clientAuth
leaf ca wild "DNS:*.gw.example" clientAuth
leaf ca both "DNS:${1:-gw-1},IP:$coord_ip" serverAuth,clientAuth
leaf ca noeku "DNS:${1:-gw-1}" ""
leaf ca cnonly "IP:192.0.2.9" clientAuth gw-cn
leaf ca gwip "IP:$coord_ip" clientAuth
leaf ca pair "DNS:gw-3,DNS:gw-4" clientAuth
chmod 600 ./*.key
