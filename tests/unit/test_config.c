// SPDX-License-Identifier: MIT
/*
 * Configuration files (user/lib/config*.c): the reference §4 examples parse, and every
 * refused input is reported at its exact FILE:LINE:COL with its exact message.
 * Error cases are tables; each entry runs as its own named cmocka test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/monotonic.h"
#include "lib/config.h"
#include "tb_math.h"
#include "lib/walk.h"
#include "lib/util.h"

/* Fixture directory: $LL_FIXTURES, else relative to the repository root. */
static void fixture(char *buf, size_t size, const char *name)
{
	const char *dir = getenv("LL_FIXTURES");

	snprintf(buf, size, "%s/%s", dir && *dir ? dir : "tests/unit/fixtures", name);
}

/* err must read "FILE:AT: MSG" exactly. A MSG ending in "..." need only
 * start the message: the rest is libyaml's wording, not ours.
 */
static void expect_msg(const struct cfg_err *err, const char *file, const char *at, const char *msg)
{
	char prefix[CFG_PATH_LEN + 32];
	size_t n, len = strlen(msg);
	bool partial = len >= 3 && !strcmp(msg + len - 3, "...");

	n = (size_t)snprintf(prefix, sizeof(prefix), "%s:%s: ", file, at);
	if (strncmp(err->msg, prefix, n))
		fail_msg("error \"%s\" does not start with \"%s\"", err->msg, prefix);
	if (partial ? !!strncmp(err->msg + n, msg, len - 3) : !!strcmp(err->msg + n, msg))
		fail_msg("error \"%s\"\n   expected \"%s%s\"", err->msg, prefix, msg);
}

/* ---- policy text cases ---- */

struct text_case {
	const char *name;
	const char *text;
	bool global_ok;	 /* parse as a coordinator's policy (standalone = false) */
	const char *at;	 /* "LINE:COL" */
	const char *msg; /* the rest of the message, exactly */
};

#define V "version: 1\n"
/* Lines 2-3: one limit 'a'. */
#define LIMIT_A "limits:\n  - {name: a, rate: 10, burst: 20}\n"
/* Lines 1-5: limit 'a' in block style; a test adds its key on line 6. */
#define LIM_A V "limits:\n  - name: a\n    rate: 10\n    burst: 20\n"
/* Lines 1-5: limit 'a' and a rule 'r' whose match goes on line 6. */
#define RULE_R	 V LIMIT_A "rules:\n  - name: r\n"
#define MATCH(m) RULE_R "    match: " m "\n    limits: [a]\n"

#define PORT_EXPECT                                                                                \
	"is not a port or port range (expected e.g. 53, 1000-2000, \"53,80,8000-8100\" or [53, "   \
	"80]; ports 0..65535, low <= high)"

#define TCPF_EXPECT                                                                                \
	"(expected syn (SYN set, ACK clear), or VALUE/MASK with flags fin, syn, rst, psh, ack, "   \
	"urg, ece, cwr joined by ',' or '|', none, or numbers: e.g. syn/syn,ack or 0x02/0x12)"
#define ICMPT_EXPECT                                                                               \
	"(expected a type 0..255, a range such as 3-5, or a name such as echo-request, "           \
	"echo-reply, destination-unreachable, time-exceeded; or a list of them)"
#define DPORT_BOUND                                                                                \
	"dst-port lists more than 8 ports or ranges (the bound LL_MAX_DPORT_RANGES: each rule "    \
	"holds 8, checked per packet; expected at most 8, or split the rule)"

static const struct text_case text_cases[] = {
    /* yaml itself */
    {"yaml_syntax_error", V "default: pass\n  drop: x\n", false, "3:7",
     "invalid yaml: mapping values are not allowed in this context..."},
    {"yaml_unclosed_flow", V "limits: [\n", false, "3:1", "invalid yaml: ..."},
    {"yaml_second_document", V "---\nversion: 2\n", false, "2:1",
     "a second document starts here (expected one document per file)"},
    {"empty_text", "", false, "1:1", "file is empty (expected a mapping of keys)"},
    {"comments_only", "# nothing here\n", false, "1:1",
     "file is empty (expected a mapping of keys)"},
    {"top_level_scalar", "hello\n", false, "1:1",
     "expected a mapping of keys at the top level, found a value"},
    {"top_level_list", "- version: 1\n", false, "1:1",
     "expected a mapping of keys at the top level, found a list"},
    {"key_not_a_word", "? [a]\n: 1\n", false, "1:3",
     "keys in policy must be plain words, found a list"},
    /* unknown keys, one per section */
    {"unknown_key_policy", V "rule: []\n", false, "2:1",
     "unknown key 'rule' in policy (expected one of: version, default, limits, rules; did you "
     "mean 'rules'?)"},
    {"unknown_key_limit", V "limits:\n  - name: a\n    rte: 10\n    burst: 20\n", false, "4:5",
     "unknown key 'rte' in limit 'a' (expected one of: name, key, prefix-v4, prefix-v6, unit, "
     "rate, burst, scope, mode, on-loss, fallback, overrides, meter; did you mean 'rate'?)"},
    {"unknown_key_fallback",
     LIM_A "    scope: global\n    on-loss: fallback\n    fallback: {rate: 5, brust: 5}\n", true,
     "8:25",
     "unknown key 'brust' in limit 'a' fallback (expected one of: rate, burst; did you mean "
     "'burst'?)"},
    {"unknown_key_rule", RULE_R "    limit: [a]\n", false, "6:5",
     "unknown key 'limit' in rule 'r' (expected one of: name, match, action, limits; did you mean "
     "'limits'?)"},
    {"unknown_key_match", MATCH("{proto: udp, port: 53}"), false, "6:25",
     "unknown key 'port' in rule 'r' match (expected one of: proto, dst-port, tcp-flags, "
     "icmp-type, src, dst, src-set, dst-set, fragments)"},
    /* tcp-flags, icmp-type, dst-port lists (issue #13) */
    {"tcp_flags_needs_tcp", MATCH("{proto: udp, tcp-flags: syn}"), false, "6:25",
     "rule 'r' match: tcp-flags needs proto tcp (proto is 'udp')"},
    {"tcp_flags_typo", MATCH("{proto: tcp, tcp-flags: sin}"), false, "6:36",
     "rule 'r' match: tcp-flags 'sin': unknown TCP flag 'sin'; did you mean 'syn'? " TCPF_EXPECT},
    {"tcp_flags_no_mask", MATCH("{proto: tcp, tcp-flags: rst}"), false, "6:36",
     "rule 'r' match: tcp-flags 'rst' has no mask " TCPF_EXPECT},
    {"tcp_flags_value_outside_mask", MATCH("{proto: tcp, tcp-flags: syn/ack}"), false, "6:36",
     "rule 'r' match: tcp-flags 'syn/ack' never matches: the value sets flags outside the mask "
     "(expected VALUE within MASK, e.g. syn/syn,ack)"},
    {"tcp_flags_number_range", MATCH("{proto: tcp, tcp-flags: syn/0x100}"), false, "6:36",
     "rule 'r' match: tcp-flags 'syn/0x100': 0x100 is out of range (expected 0..255, 0xff)"},
    {"tcp_flags_empty_value", MATCH("{proto: tcp, tcp-flags: /syn}"), false, "6:36",
     "rule 'r' match: tcp-flags '/syn' has an empty or overlong value " TCPF_EXPECT},
    {"tcp_flags_empty_mask", MATCH("{proto: tcp, tcp-flags: 'none/0'}"), false, "6:36",
     "rule 'r' match: tcp-flags 'none/0' has an empty mask: it tests nothing (expected a mask "
     "with at least one flag, e.g. syn/syn,ack)"},
    {"tcp_flags_list", MATCH("{proto: tcp, tcp-flags: [syn]}"), false, "6:36",
     "rule 'r' match: tcp-flags must be a single value, found a list " TCPF_EXPECT},
    {"tcp_flags_fragments_only", MATCH("{proto: tcp, tcp-flags: syn, fragments: only}"), false,
     "6:52",
     "rule 'r' match: fragments 'only' never matches with tcp-flags: a non-first fragment "
     "carries no TCP header (expected a rule without tcp-flags)"},
    {"icmp_type_needs_icmp", MATCH("{proto: udp, icmp-type: 8}"), false, "6:25",
     "rule 'r' match: icmp-type needs proto icmp or icmpv6 (proto is 'udp')"},
    {"icmp_type_typo", MATCH("{proto: icmp, icmp-type: echo-requst}"), false, "6:37",
     "rule 'r' match: icmp-type 'echo-requst' is not a known type; did you mean "
     "'echo-request'? " ICMPT_EXPECT},
    {"icmp_type_v6_name_under_icmp", MATCH("{proto: icmp, icmp-type: neighbor-solicitation}"),
     false, "6:37",
     "rule 'r' match: icmp-type 'neighbor-solicitation' is an ICMPv6 type, but proto is icmp "
     "(expected a number, or proto icmpv6)"},
    {"icmp_type_v4_name_under_icmpv6", MATCH("{proto: icmpv6, icmp-type: timestamp-request}"),
     false, "6:39",
     "rule 'r' match: icmp-type 'timestamp-request' is an ICMP type, but proto is icmpv6 "
     "(expected a number, or proto icmp)"},
    {"icmp_type_out_of_range", MATCH("{proto: icmp, icmp-type: 256}"), false, "6:37",
     "rule 'r' match: icmp-type '256' is not a type or range " ICMPT_EXPECT},
    {"icmp_type_range_reversed", MATCH("{proto: icmp, icmp-type: 5-3}"), false, "6:37",
     "rule 'r' match: icmp-type '5-3' is not a type or range " ICMPT_EXPECT},
    {"icmp_type_empty_list", MATCH("{proto: icmp, icmp-type: []}"), false, "6:37",
     "rule 'r' match: icmp-type is an empty list (expected e.g. [echo-request])"},
    {"icmp_type_item_mapping", MATCH("{proto: icmp, icmp-type: [8, {a: 1}]}"), false, "6:41",
     "rule 'r' match: icmp-type items must be types, found a mapping " ICMPT_EXPECT},
    {"icmp_type_fragments_only", MATCH("{proto: icmp, icmp-type: 8, fragments: only}"), false,
     "6:51",
     "rule 'r' match: fragments 'only' never matches with icmp-type: a non-first fragment "
     "carries no ICMP header (expected a rule without icmp-type)"},
    {"dport_list_bad_item", MATCH("{proto: tcp, dst-port: '53,80,x'}"), false, "6:35",
     "rule 'r' match: dst-port 'x' " PORT_EXPECT},
    {"dport_list_too_many", MATCH("{proto: tcp, dst-port: [1, 2, 3, 4, 5, 6, 7, 8, 9]}"), false,
     "6:60", "rule 'r' match: " DPORT_BOUND},
    {"dport_commas_too_many", MATCH("{proto: tcp, dst-port: '1,2,3,4,5,6,7,8,9'}"), false, "6:35",
     "rule 'r' match: " DPORT_BOUND},
    {"dport_empty_list", MATCH("{proto: tcp, dst-port: []}"), false, "6:35",
     "rule 'r' match: dst-port is an empty list (expected e.g. [53, 80])"},
    {"dport_item_list", MATCH("{proto: tcp, dst-port: [53, [1]]}"), false, "6:40",
     "rule 'r' match: dst-port items must be ports or ranges, found a list (expected e.g. [53, "
     "1000-2000])"},
    {"dport_no_port", MATCH("{proto: tcp, dst-port: ','}"), false, "6:35",
     "rule 'r' match: dst-port ',' names no port (expected e.g. 53 or 1000-2000, ports "
     "0..65535, low <= high)"},
    {"dport_list_item_range", MATCH("{proto: tcp, dst-port: [53, 70000]}"), false, "6:40",
     "rule 'r' match: dst-port '70000' " PORT_EXPECT},
    /* duplicates */
    {"duplicate_key_policy", V "default: pass\ndefault: drop\n", false, "3:1",
     "duplicate key 'default' in policy (first at line 2)"},
    {"duplicate_key_limit", LIM_A "    rate: 20\n", false, "6:5",
     "duplicate key 'rate' in limit 'a' (first at line 4)"},
    {"duplicate_key_match", MATCH("{proto: udp, proto: tcp}"), false, "6:25",
     "duplicate key 'proto' in rule 'r' match (first at line 6)"},
    {"duplicate_limit_name",
     V "limits:\n  - {name: a, rate: 1, burst: 1}\n  - {name: a, rate: 2, burst: 2}\n", false,
     "4:12", "duplicate limit name 'a' (first at line 3; expected unique names)"},
    {"duplicate_rule_name",
     V LIMIT_A "rules:\n  - {name: r, limits: [a]}\n  - {name: r, limits: [a]}\n", false, "6:12",
     "duplicate rule name 'r' (first at line 5; expected unique names)"},
    /* rate and burst */
    {"rate_not_a_count",
     V "limits:\n  - name: per-client\n    key: src-ip\n    burst: 10\n    unit: packets\n"
       "    rate: 10x\n",
     false, "7:11",
     "limit 'per-client': rate '10x' is not a count (expected e.g. 1000, 10k, 2.5M)"},
    {"rate_zero", V "limits:\n  - name: a\n    burst: 20\n    rate: 0\n", false, "5:11",
     "limit 'a': rate '0' is out of range (expected 1..100G)"},
    {"rate_above_max", V "limits:\n  - name: a\n    burst: 20\n    rate: 100000000001\n", false,
     "5:11", "limit 'a': rate '100000000001' is out of range (expected 1..100G)"},
    {"rate_overflows", V "limits:\n  - name: a\n    burst: 20\n    rate: 99999999999999999999\n",
     false, "5:11", "limit 'a': rate '99999999999999999999' is out of range (expected 1..100G)"},
    {"rate_fraction", V "limits:\n  - name: a\n    burst: 20\n    rate: 2.5\n", false, "5:11",
     "limit 'a': rate '2.5' is not a count (expected e.g. 1000, 10k, 2.5M)"},
    {"rate_negative", V "limits:\n  - name: a\n    burst: 20\n    rate: -5\n", false, "5:11",
     "limit 'a': rate '-5' is not a count (expected e.g. 1000, 10k, 2.5M)"},
    {"rate_empty", V "limits:\n  - name: a\n    burst: 20\n    rate: ''\n", false, "5:11",
     "limit 'a': rate is empty (expected e.g. 1000, 10k, 2.5M)"},
    {"rate_mapping", V "limits:\n  - name: a\n    burst: 20\n    rate: {per: s}\n", false, "5:11",
     "limit 'a': rate must be a single value, found a mapping (expected e.g. 1000, 10k, 2.5M)"},
    {"burst_zero", V "limits:\n  - name: a\n    rate: 20\n    burst: 0\n", false, "5:12",
     "limit 'a': burst '0' is out of range (expected 1..18446743973)"},
    {"burst_above_max", V "limits:\n  - name: a\n    rate: 20\n    burst: 18446743974\n", false,
     "5:12", "limit 'a': burst '18446743974' is out of range (expected 1..18446743973)"},
    {"burst_not_a_count", V "limits:\n  - name: a\n    rate: 20\n    burst: lots\n", false, "5:12",
     "limit 'a': burst 'lots' is not a count (expected e.g. 1000, 10k, 2.5M)"},
    /* prefixes of a limit */
    {"prefix_v4_range", LIM_A "    key: src-ip\n    prefix-v4: 33\n", false, "7:16",
     "limit 'a': prefix-v4 '33' is out of range (expected 0..32)"},
    {"prefix_v6_range", LIM_A "    key: dst-ip\n    prefix-v6: 129\n", false, "7:16",
     "limit 'a': prefix-v6 '129' is out of range (expected 0..128)"},
    {"prefix_v4_not_integer", LIM_A "    key: src-ip\n    prefix-v4: /24\n", false, "7:16",
     "limit 'a': prefix-v4 '/24' is not an integer (expected digits only, e.g. 1)"},
    {"prefix_needs_address_key", LIM_A "    key: dst-port\n    prefix-v4: 24\n", false, "7:5",
     "limit 'a': prefix-v4 applies only to key src-ip or dst-ip (key is 'dst-port')"},
    {"prefix_with_default_key", LIM_A "    prefix-v6: 64\n", false, "6:5",
     "limit 'a': prefix-v6 applies only to key src-ip or dst-ip (key is 'none')"},
    /* enums */
    {"enum_key", LIM_A "    key: src\n", false, "6:10",
     "limit 'a': key 'src' is not valid (expected one of: none, src-ip, dst-ip, dst-port, "
     "flow)"},
    {"enum_unit", LIM_A "    unit: packet\n", false, "6:11",
     "limit 'a': unit 'packet' is not valid (expected one of: packets, bytes)"},
    {"enum_scope", LIM_A "    scope: planet\n", false, "6:12",
     "limit 'a': scope 'planet' is not valid (expected one of: local, global)"},
    {"enum_mode", LIM_A "    mode: dry-run\n", false, "6:11",
     "limit 'a': mode 'dry-run' is not valid (expected one of: enforce, shadow)"},
    {"enum_on_loss", LIM_A "    scope: global\n    on-loss: panic\n", true, "7:14",
     "limit 'a': on-loss 'panic' is not valid (expected one of: fail-closed, fallback, "
     "fail-open)"},
    {"enum_default", V "default: block\n", false, "2:10",
     "default 'block' is not valid (expected one of: pass, drop)"},
    /* required keys and the version */
    {"missing_version", "limits: []\n", false, "1:1",
     "missing required key 'version' (expected e.g. version: 1)"},
    {"version_zero", "version: 0\n", false, "1:10",
     "version '0' is out of range (expected at least 1)"},
    {"version_not_integer", "version: three\n", false, "1:10",
     "version 'three' is not an integer (expected digits only, e.g. 1)"},
    {"missing_rate", V "limits:\n  - name: a\n    burst: 20\n", false, "3:5",
     "limit 'a': missing required key 'rate' (expected e.g. rate: 1000)"},
    {"missing_burst", V "limits:\n  - name: a\n    rate: 20\n", false, "3:5",
     "limit 'a': missing required key 'burst' (expected e.g. burst: 2000)"},
    {"missing_limit_name", V "limits:\n  - {rate: 1, burst: 1}\n", false, "3:5",
     "limit #1: missing required key 'name' (expected e.g. name: per-client)"},
    {"missing_rule_name", V LIMIT_A "rules:\n  - {limits: [a]}\n", false, "5:5",
     "rule #1: missing required key 'name' (expected e.g. name: dns)"},
    {"missing_rule_limits", RULE_R, false, "5:5",
     "rule 'r': missing required key 'limits' (expected e.g. limits: [per-client], or action: "
     "pass or drop)"},
    {"missing_fallback_burst",
     LIM_A "    scope: global\n    on-loss: fallback\n    fallback: {rate: 5}\n", true, "8:15",
     "limit 'a' fallback: missing required key 'burst' (expected e.g. burst: 50)"},
    /* names */
    {"name_bad_characters", V "limits:\n  - {name: 'a b', rate: 1, burst: 1}\n", false, "3:12",
     "limit 'a b': name 'a b' is not a valid name (expected 1 to 31 characters from A-Z a-z "
     "0-9 _ . -)"},
    {"name_too_long",
     V "limits:\n  - {name: abcdefghijklmnopqrstuvwxyz012345, rate: 1, burst: 1}\n", false, "3:12",
     "limit 'abcdefghijklmnopqrstuvwxyz012345': name 'abcdefghijklmnopqrstuvwxyz012345' is not "
     "a valid name (expected 1 to 31 characters from A-Z a-z 0-9 _ . -)"},
    /* rules and their limits */
    {"rule_unknown_limit", RULE_R "    limits: [a, b]\n", false, "6:17",
     "rule 'r': unknown limit 'b' (expected one of the policy's limits: a)"},
    {"rule_unknown_limit_block_list", RULE_R "    limits:\n      - a\n      - nope\n", false, "8:9",
     "rule 'r': unknown limit 'nope' (expected one of the policy's limits: a)"},
    {"rule_no_limits_defined", V "rules:\n  - {name: r, limits: [a]}\n", false, "3:24",
     "rule 'r': unknown limit 'a' (expected one of the policy's limits: none are defined)"},
    {"rule_too_many_limits",
     V "limits:\n  - {name: l1, rate: 1, burst: 1}\n  - {name: l2, rate: 1, burst: 1}\n"
       "  - {name: l3, rate: 1, burst: 1}\n  - {name: l4, rate: 1, burst: 1}\n"
       "  - {name: l5, rate: 1, burst: 1}\nrules:\n  - name: r\n"
       "    limits: [l1, l2, l3, l4, l5]\n",
     false, "10:30", "rule 'r': too many limits (expected at most 4)"},
    {"rule_empty_limits", RULE_R "    limits: []\n", false, "6:13",
     "rule 'r': limits is empty (expected at least one, e.g. limits: [per-client])"},
    {"rule_limit_twice", RULE_R "    limits: [a, a]\n", false, "6:17",
     "rule 'r': limit 'a' is listed twice (expected each limit once)"},
    {"rule_limits_not_names", RULE_R "    limits: [[a]]\n", false, "6:14",
     "rule 'r': limits must list limit names, found a list"},
    /* scope, on-loss and fallback */
    {"global_in_standalone", LIM_A "    scope: global\n", false, "6:12",
     "limit 'a': scope 'global' needs a coordinator (set coordinator: in the agent file, or use "
     "scope: local)"},
    {"per_key_global_standalone", LIM_A "    key: dst-port\n    scope: global\n", false, "7:12",
     "limit 'a': scope 'global' needs a coordinator (set coordinator: in the agent file, or use "
     "scope: local)"},
    {"fragments_only_with_port", MATCH("{proto: udp, dst-port: 53, fragments: only}"), false,
     "6:50",
     "rule 'r' match: fragments 'only' never matches with dst-port: a non-first fragment "
     "carries no ports (expected a rule without dst-port)"},
    {"meter_with_local_scope", LIM_A "    meter: true\n", false, "6:12",
     "limit 'a': meter applies only to scope global (scope is 'local')"},
    {"on_loss_with_local_scope", LIM_A "    on-loss: fail-open\n", false, "6:5",
     "limit 'a': on-loss applies only to scope global (scope is 'local')"},
    {"fallback_without_on_loss_fallback",
     LIM_A "    scope: global\n    on-loss: fail-open\n    fallback: {rate: 1, burst: 1}\n", true,
     "8:5",
     "limit 'a': fallback applies only with scope: global and on-loss: fallback (on-loss is "
     "'fail-open')"},
    {"fallback_with_default_on_loss",
     LIM_A "    scope: global\n    fallback: {rate: 1, burst: 1}\n", true, "7:5",
     "limit 'a': fallback applies only with scope: global and on-loss: fallback (on-loss is "
     "'fail-closed')"},
    {"on_loss_fallback_without_fallback", LIM_A "    scope: global\n    on-loss: fallback\n", true,
     "7:14",
     "limit 'a': on-loss 'fallback' needs fallback rate and burst (expected e.g. fallback: "
     "{rate: 50, burst: 50})"},
    {"fallback_rate_above_limit",
     LIM_A "    scope: global\n    on-loss: fallback\n    fallback: {rate: 11, burst: 5}\n", true,
     "8:22", "limit 'a': fallback rate '11' exceeds the limit's rate (expected at most 10)"},
    {"fallback_burst_above_limit",
     LIM_A "    scope: global\n    on-loss: fallback\n    fallback: {rate: 5, burst: 21}\n", true,
     "8:32", "limit 'a': fallback burst '21' exceeds the limit's burst (expected at most 20)"},
    {"fallback_bad_rate",
     LIM_A "    scope: global\n    on-loss: fallback\n    fallback: {rate: 1x, burst: 5}\n", true,
     "8:22", "limit 'a' fallback: rate '1x' is not a count (expected e.g. 1000, 10k, 2.5M)"},
    /* match: prefixes */
    {"src_host_bits", MATCH("{src: 10.0.0.1/8}"), false, "6:18",
     "rule 'r' match: src '10.0.0.1/8' has host bits set (expected 10.0.0.0/8)"},
    {"dst_v6_host_bits", MATCH("{dst: 2001:db8::1/32}"), false, "6:18",
     "rule 'r' match: dst '2001:db8::1/32' has host bits set (expected 2001:db8::/32)"},
    {"src_not_a_prefix", MATCH("{src: 10.0.0/8}"), false, "6:18",
     "rule 'r' match: src '10.0.0/8' is not a prefix (expected e.g. 198.18.0.0/15 or "
     "2001:db8::/32)"},
    {"src_prefix_too_long", MATCH("{src: 10.0.0.0/33}"), false, "6:18",
     "rule 'r' match: src '10.0.0.0/33' has a prefix length out of range (expected at most /32 "
     "for IPv4 and /128 for IPv6)"},
    {"src_dst_families_differ", MATCH("{src: 10.0.0.0/8, dst: 2001:db8::/32}"), false, "6:35",
     "rule 'r' match: dst is IPv6 but src is IPv4 (expected one address family)"},
    /* match: ports and protocols */
    {"port_range_reversed", MATCH("{proto: tcp, dst-port: 2000-1000}"), false, "6:35",
     "rule 'r' match: dst-port '2000-1000' " PORT_EXPECT},
    {"port_above_65535", MATCH("{proto: tcp, dst-port: 70000}"), false, "6:35",
     "rule 'r' match: dst-port '70000' " PORT_EXPECT},
    {"port_by_name", MATCH("{proto: tcp, dst-port: http}"), false, "6:35",
     "rule 'r' match: dst-port 'http' " PORT_EXPECT},
    {"dst_port_without_proto", MATCH("{dst-port: 53}"), false, "6:13",
     "rule 'r' match: dst-port needs proto tcp or udp (proto is 'any')"},
    {"dst_port_with_icmp", MATCH("{proto: icmp, dst-port: 53}"), false, "6:26",
     "rule 'r' match: dst-port needs proto tcp or udp (proto is 'icmp')"},
    {"dst_port_with_proto_number", MATCH("{proto: 47, dst-port: 53}"), false, "6:24",
     "rule 'r' match: dst-port needs proto tcp or udp (proto is '47')"},
    {"proto_unknown", MATCH("{proto: tpc}"), false, "6:20",
     "rule 'r' match: proto 'tpc' is not valid (expected one of: any, tcp, udp, icmp, icmpv6, "
     "or a number 0..255)"},
    {"proto_above_255", MATCH("{proto: 256}"), false, "6:20",
     "rule 'r' match: proto '256' is not valid (expected one of: any, tcp, udp, icmp, icmpv6, "
     "or a number 0..255)"},
    {"icmp_with_ipv6", MATCH("{proto: icmp, dst: 2001:db8::/32}"), false, "6:20",
     "rule 'r' match: proto 'icmp' never matches IPv6 addresses (expected icmpv6)"},
    {"icmpv6_with_ipv4", MATCH("{proto: icmpv6, src: 10.0.0.0/8}"), false, "6:20",
     "rule 'r' match: proto 'icmpv6' never matches IPv4 addresses (expected icmp)"},
    /* shapes */
    {"limit_not_a_mapping", V "limits: [5]\n", false, "2:10",
     "limit #1: expected a mapping, found a value"},
    {"limits_not_a_list", V "limits: {a: 1}\n", false, "2:9",
     "limits must be a list, found a mapping"},
    {"match_not_a_mapping", MATCH("udp"), false, "6:12",
     "rule 'r' match: expected a mapping, found a value"},
};

static void run_text_case(void **state)
{
	const struct text_case *tc = *state;
	struct cfg_policy *p = calloc(1, sizeof(*p));
	struct cfg_err err;
	int rc;

	assert_non_null(p);
	p->version = 42;
	rc = cfg_policy_parse("policy.yaml", tc->text, strlen(tc->text), !tc->global_ok, p, &err);
	if (rc != -EINVAL)
		fail_msg("returned %d, expected -EINVAL (message: \"%s\")", rc, rc ? err.msg : "");
	expect_msg(&err, "policy.yaml", tc->at, tc->msg);
	/* A refused file leaves the previous policy as it was. */
	assert_true(p->version == 42);
	free(p);
}

/* ---- file cases: agent, coordinator, detection ---- */

enum loader { LOAD_POLICY, LOAD_AGENT, LOAD_COORD, LOAD_DETECT };

struct file_case {
	const char *name;
	enum loader loader;
	const char *file;
	const char *err_file; /* where the error is, when not in file */
	int rc;
	const char *at;
	const char *msg;
};

static const struct file_case file_cases[] = {
    {"agent_neither_policy_nor_coordinator", LOAD_AGENT, "agent-neither.yaml", NULL, -EINVAL, "1:1",
     "agent file needs policy: (standalone) or coordinator: (coordinated), found neither"},
    {"agent_both_policy_and_coordinator", LOAD_AGENT, "agent-both.yaml", NULL, -EINVAL, "5:1",
     "agent file has both policy: and coordinator: (expected one: policy: for a standalone "
     "agent, coordinator: for a coordinated one)"},
    {"agent_unknown_key", LOAD_AGENT, "agent-unknown-key.yaml", NULL, -EINVAL, "2:1",
     "unknown key 'interface' in agent file (expected one of: node, interfaces, pin-dir, "
     "policy, coordinator, metrics, max-keys, max-flow-keys, tls, attach; did you mean "
     "'interfaces'?)"},
    {"agent_interface_unknown_key", LOAD_AGENT, "agent-iface-unknown-key.yaml", NULL, -EINVAL,
     "3:5",
     "unknown key 'mdoe' in interface 'eth0' (expected one of: name, mode; did you mean "
     "'mode'?)"},
    {"agent_coordinator_unknown_key", LOAD_AGENT, "agent-coordinator-unknown-key.yaml", NULL,
     -EINVAL, "2:15",
     "unknown key 'addr' in coordinator (expected one of: address, addresses, insecure)"},
    {"agent_coordinator_plaintext_beyond_loopback", LOAD_AGENT, "agent-coordinator-plaintext.yaml",
     NULL, -EINVAL, "2:14",
     "coordinator '203.0.113.7:7450' is beyond loopback without tls: (expected tls: {cert, key, "
     "ca}, or coordinator: {insecure: true} to accept an unauthenticated coordinator)"},
    {"agent_interface_name_too_long", LOAD_AGENT, "agent-bad-iface.yaml", NULL, -EINVAL, "2:12",
     "interface 'a-very-long-interface-name': name 'a-very-long-interface-name' is not an "
     "interface name (expected 1 to 15 characters without '/', ':' or spaces)"},
    {"agent_interface_twice", LOAD_AGENT, "agent-dup-iface.yaml", NULL, -EINVAL, "3:12",
     "interface 'eth0': name 'eth0' is listed twice (expected each interface once)"},
    {"agent_interface_mode", LOAD_AGENT, "agent-bad-mode.yaml", NULL, -EINVAL, "2:24",
     "interface 'eth0': mode 'fast' is not valid (expected one of: native, generic, auto)"},
    {"agent_no_interfaces", LOAD_AGENT, "agent-no-interfaces.yaml", NULL, -EINVAL, "2:13",
     "interfaces is empty (expected at least one, e.g. interfaces: [{name: eth0, mode: "
     "native}])"},
    {"agent_bad_metrics_address", LOAD_AGENT, "agent-bad-metrics.yaml", NULL, -EINVAL, "3:10",
     "metrics '127.0.0.1:99999' is not an address (expected host:port, e.g. 127.0.0.1:9475 or "
     "[::1]:9475)"},
    {"agent_policy_with_global_limit", LOAD_AGENT, "agent-global.yaml", "policy-global.yaml",
     -EINVAL, "10:12",
     "limit 'tenant-a': scope 'global' needs a coordinator (set coordinator: in the agent "
     "file, or use scope: local)"},
    {"policy_global_in_standalone", LOAD_POLICY, "policy-global.yaml", NULL, -EINVAL, "10:12",
     "limit 'tenant-a': scope 'global' needs a coordinator (set coordinator: in the agent "
     "file, or use scope: local)"},
    {"coord_refresh_not_below_ttl", LOAD_COORD, "coord-refresh.yaml", NULL, -EINVAL, "4:12",
     "lease: refresh 1s is not shorter than ttl 1s (expected refresh < ttl)"},
    {"coord_lease_unknown_key", LOAD_COORD, "coord-lease-unknown-key.yaml", NULL, -EINVAL, "2:18",
     "unknown key 'refesh' in lease (expected one of: ttl, refresh; did you mean 'refresh'?)"},
    {"coord_unknown_key", LOAD_COORD, "coord-unknown-key.yaml", NULL, -EINVAL, "3:1",
     "unknown key 'statedir' in coordinator file (expected one of: listen, policy, state-dir, "
     "lease, metrics, gateways, user, pending-per-address, pending-per-prefix, tls, insecure, ledger, "
     "ledger-retention, ledger-series-per-holder, grant-key, replicas; did you mean "
     "'state-dir'?)"},
    {"coord_replicas_etcd_not_url", LOAD_COORD, "coord-replicas-bad-etcd.yaml", NULL, -EINVAL,
     "3:19",
     "etcd endpoint '127.0.0.1:2379' is not an http:// or https:// URL (expected e.g. "
     "http://127.0.0.1:2379)"},
    {"coord_replicas_https_without_tls", LOAD_COORD, "coord-replicas-https-no-tls.yaml", NULL,
     -EINVAL, "4:9",
     "etcd endpoint 'https://10.0.0.5:2379' is https:// but replicas has no tls: (expected "
     "tls: {ca: ..., cert: ..., key: ...})"},
    {"coord_replicas_tls_with_http", LOAD_COORD, "coord-replicas-tls-http.yaml", NULL, -EINVAL,
     "4:9",
     "etcd endpoint 'http://10.0.0.6:2379' is plain http:// while replicas has tls: (expected "
     "every endpoint https://)"},
    {"coord_replicas_ttl_below_5s", LOAD_COORD, "coord-replicas-ttl.yaml", NULL, -EINVAL, "3:85",
     "ttl '2s' is out of range (expected 5s..1m)"},
    {"coord_replicas_prefix_relative", LOAD_COORD, "coord-replicas-prefix.yaml", NULL, -EINVAL,
     "3:88",
     "prefix 'leaseline' is not a key prefix (expected / then [A-Za-z0-9_.-/], at most 63, "
     "e.g. /leaseline/eu)"},
    {"coord_replicas_metered_limit", LOAD_COORD, "coord-replicas-meter.yaml", "policy-metered.yaml",
     -EINVAL, "14:5",
     "limit 'tenant-b': meter: true under replicas: needs the ledger they share (expected "
     "ledger: postgresql://... in the coordinator's file, or no meter:)"},
    {"agent_address_and_addresses", LOAD_AGENT, "agent-address-and-addresses.yaml", NULL, -EINVAL,
     "2:51",
     "coordinator has both address: and addresses: (expected one: addresses: lists every "
     "replica)"},
    {"agent_replica_plaintext_beyond_loopback", LOAD_AGENT, "agent-replicas-plaintext.yaml", NULL,
     -EINVAL, "2:14",
     "coordinator '203.0.113.7:7450' is beyond loopback without tls: (expected tls: {cert, key, "
     "ca}, or coordinator: {insecure: true} to accept an unauthenticated coordinator)"},
    {"agent_replica_twice", LOAD_AGENT, "agent-replicas-twice.yaml", NULL, -EINVAL, "2:38",
     "coordinator: address '127.0.0.1:7450' is listed twice (expected each replica once)"},
    {"coord_retention_not_days", LOAD_COORD, "coord-retention-bad.yaml", NULL, -EINVAL, "3:19",
     "ledger-retention '400' is not a retention (expected days or hours, as 400d or 9600h, or "
     "forever)"},
    {"coord_retention_too_short", LOAD_COORD, "coord-retention-short.yaml", NULL, -EINVAL, "3:19",
     "ledger-retention '0d' is out of range (expected 1d to 36600d, or forever)"},
    {"coord_series_quota_too_small", LOAD_COORD, "coord-series-small.yaml", NULL, -EINVAL, "3:27",
     "ledger-series-per-holder '10' is out of range (expected 1024..1073741824)"},
    {"coord_public_without_tls", LOAD_COORD, "coord-public-no-tls.yaml", NULL, -EINVAL, "1:9",
     "listen '198.18.0.1:7450' is beyond loopback without tls: (expected tls: {cert, key, ca}, "
     "or insecure: true to accept unauthenticated agents)"},
    {"coord_tls_missing_ca", LOAD_COORD, "coord-tls-no-ca.yaml", NULL, -EINVAL, "3:6",
     "missing required key 'ca' (expected e.g. ca: /etc/leaseline/ca.crt)"},
    {"coord_insecure_not_bool", LOAD_COORD, "coord-insecure-yes.yaml", NULL, -EINVAL, "3:11",
     "insecure 'yes' is not valid (expected one of: false, true)"},
    {"coord_missing_policy", LOAD_COORD, "coord-no-policy.yaml", NULL, -EINVAL, "1:1",
     "missing required key 'policy' (expected e.g. policy: policy.yaml)"},
    {"coord_bad_duration", LOAD_COORD, "coord-bad-duration.yaml", NULL, -EINVAL, "2:14",
     "lease: ttl '2' is not a duration (expected e.g. 2s, 500ms, 250us)"},
    {"policy_file_syntax_error", LOAD_POLICY, "syntax-error.yaml", NULL, -EINVAL, "5:4",
     "invalid yaml: did not find expected '-' indicator..."},
    {"detect_empty_file", LOAD_DETECT, "empty.yaml", NULL, -EINVAL, "1:1",
     "file is empty (expected a mapping of keys)"},
    {"detect_top_level_list", LOAD_DETECT, "top-list.yaml", NULL, -EINVAL, "1:1",
     "expected a mapping of keys at the top level, found a list"},
    {"detect_unknown_kind", LOAD_DETECT, "kind-unknown.yaml", NULL, -EINVAL, "1:1",
     "cannot tell what kind of file this is (expected a policy with version:, an agent file "
     "with interfaces: or a coordinator file with listen:)"},
};

/* Everything a loader may write, on the heap: struct cfg_policy is ~10 kB. */
struct outputs {
	struct cfg_policy policy;
	struct cfg_agent agent;
	struct cfg_coord coord;
	enum cfg_kind kind;
};

static int load(enum loader loader, const char *path, struct outputs *o, struct cfg_err *err)
{
	switch (loader) {
	case LOAD_POLICY:
		return cfg_policy_load(path, true, &o->policy, err);
	case LOAD_AGENT:
		return cfg_agent_load(path, &o->agent, &o->policy, err);
	case LOAD_COORD:
		return cfg_coord_load(path, &o->coord, &o->policy, err);
	case LOAD_DETECT:
		return cfg_detect_kind(path, &o->kind, err);
	}
	return -EINVAL;
}

static void run_file_case(void **state)
{
	const struct file_case *fc = *state;
	struct outputs *o = calloc(1, sizeof(*o));
	char path[CFG_PATH_LEN], err_path[CFG_PATH_LEN];
	struct cfg_err err;
	int rc;

	assert_non_null(o);
	fixture(path, sizeof(path), fc->file);
	fixture(err_path, sizeof(err_path), fc->err_file ? fc->err_file : fc->file);
	o->policy.version = 42;
	o->agent.max_keys = 42;
	o->coord.ttl_ns = 42;
	rc = load(fc->loader, path, o, &err);
	if (rc != fc->rc)
		fail_msg("returned %d, expected %d (message: \"%s\")", rc, fc->rc,
			 rc ? err.msg : "");
	expect_msg(&err, err_path, fc->at, fc->msg);
	assert_true(o->policy.version == 42);
	assert_true(o->agent.max_keys == 42);
	assert_true(o->coord.ttl_ns == 42);
	free(o);
}

/* ---- good files ---- */

static struct outputs *load_ok(enum loader loader, const char *name)
{
	struct outputs *o = calloc(1, sizeof(*o));
	char path[CFG_PATH_LEN];
	struct cfg_err err;
	int rc;

	assert_non_null(o);
	fixture(path, sizeof(path), name);
	rc = load(loader, path, o, &err);
	if (rc)
		fail_msg("%s: returned %d: %s", name, rc, err.msg);
	return o;
}

static struct cfg_policy *parse_ok(const char *text, bool standalone)
{
	struct cfg_policy *p = calloc(1, sizeof(*p));
	struct cfg_err err;
	int rc;

	assert_non_null(p);
	rc = cfg_policy_parse("policy.yaml", text, strlen(text), standalone, p, &err);
	if (rc)
		fail_msg("returned %d: %s", rc, err.msg);
	return p;
}

static void test_spec_policy(void **state)
{
	struct outputs *o = load_ok(LOAD_POLICY, "policy.yaml");
	const struct cfg_policy *p = &o->policy;
	const struct cfg_limit *pc = &p->limits[0], *dns = &p->limits[1];
	const struct cfg_rule *r = &p->rules[0];
	static const uint8_t src[4] = {198, 18, 0, 0}, dst[4] = {198, 19, 0, 0};

	(void)state;
	assert_true(p->version == 3);
	assert_int_equal(p->default_action, LL_ACT_PASS);
	assert_int_equal(p->n_limits, 2);
	assert_string_equal(pc->name, "per-client");
	assert_int_equal(pc->key_mode, LL_KEY_SRC_IP);
	assert_int_equal(pc->prefix_v4, 32);
	assert_int_equal(pc->prefix_v6, 64);
	assert_int_equal(pc->unit, LL_UNIT_PACKETS);
	assert_true(pc->rate == 1000 && pc->burst == 2000);
	assert_int_equal(pc->scope, LL_SCOPE_LOCAL);
	assert_int_equal(pc->mode, LL_MODE_ENFORCE);
	assert_false(pc->has_fallback);
	assert_int_equal(pc->line, 7);
	assert_int_equal(pc->col, 5);
	assert_string_equal(dns->name, "dns-total");
	assert_int_equal(dns->key_mode, LL_KEY_NONE);
	assert_true(dns->rate == 10000 && dns->burst == 20000);
	assert_int_equal(p->n_rules, 1);
	assert_string_equal(r->name, "dns");
	assert_int_equal(r->proto, IPPROTO_UDP);
	assert_true(r->has_dport && r->n_dport == 1 && r->dport[0].lo == 53 &&
		    r->dport[0].hi == 53);
	assert_true(r->has_src && r->src_family == 4 && r->src_plen == 15);
	assert_memory_equal(r->src_addr, src, 4);
	assert_true(r->has_dst && r->dst_family == 4 && r->dst_plen == 16);
	assert_memory_equal(r->dst_addr, dst, 4);
	assert_int_equal(r->n_limits, 2);
	assert_int_equal(r->limit[0], 0);
	assert_int_equal(r->limit[1], 1);
	assert_int_equal(r->line, 24);
	free(o);
}

/* meter: the same parse for check, agent and coordinator (one parser). */
static void test_meter_parsed(void **state)
{
	struct cfg_policy *p = parse_ok(LIM_A "    scope: global\n    meter: true\n", false);

	(void)state;
	assert_int_equal(p->limits[0].meter, 1);
	free(p);
	p = parse_ok(LIM_A "    scope: global\n", false);
	assert_int_equal(p->limits[0].meter, 0);
	free(p);
}

static void test_coordinator_policy(void **state)
{
	struct cfg_policy *p = calloc(1, sizeof(*p));
	const struct cfg_limit *a = &p->limits[0], *b = &p->limits[1], *f = &p->limits[2];
	static const uint8_t net[4] = {0x20, 0x01, 0x0d, 0xb8};
	char path[CFG_PATH_LEN];
	struct cfg_err err;

	(void)state;
	assert_non_null(p);
	fixture(path, sizeof(path), "policy-global.yaml");
	assert_int_equal(cfg_policy_load(path, false, p, &err), 0);
	assert_true(p->version == 7);
	assert_int_equal(p->default_action, LL_ACT_DROP);
	assert_int_equal(p->n_limits, 3);
	assert_int_equal(a->unit, LL_UNIT_BYTES);
	assert_true(a->rate == 2500000000ULL && a->burst == 100000000ULL);
	assert_int_equal(a->scope, LL_SCOPE_GLOBAL);
	assert_int_equal(a->on_loss, LL_ON_LOSS_FALLBACK);
	assert_true(a->has_fallback && a->fallback_rate == 50 && a->fallback_burst == 50);
	assert_int_equal(b->on_loss, LL_ON_LOSS_FAIL_OPEN);
	assert_false(b->has_fallback);
	assert_int_equal(f->key_mode, LL_KEY_FLOW);
	assert_int_equal(f->mode, LL_MODE_SHADOW);
	assert_int_equal(f->scope, LL_SCOPE_LOCAL);
	assert_int_equal(p->n_rules, 2);
	assert_int_equal(p->rules[0].proto, IPPROTO_TCP);
	assert_true(p->rules[0].dport[0].lo == 80 && p->rules[0].dport[0].hi == 443);
	assert_true(p->rules[0].has_dst && p->rules[0].dst_family == 6);
	assert_memory_equal(p->rules[0].dst_addr, net, 4);
	assert_false(p->rules[0].has_src);
	assert_int_equal(p->rules[0].limit[1], 2);
	/* No match: everything. */
	assert_int_equal(p->rules[1].proto, 0);
	assert_false(p->rules[1].has_src || p->rules[1].has_dst || p->rules[1].has_dport);
	assert_int_equal(p->rules[1].limit[0], 1);
	free(p);
}

static void test_spec_agent_standalone(void **state)
{
	struct outputs *o = load_ok(LOAD_AGENT, "agent.yaml");
	const struct cfg_agent *a = &o->agent;
	char policy[CFG_PATH_LEN];

	(void)state;
	fixture(policy, sizeof(policy), "policy.yaml");
	assert_string_equal(a->node, "gw-1");
	assert_int_equal(a->n_ifaces, 1);
	assert_string_equal(a->ifaces[0].name, "eth0");
	assert_int_equal(a->ifaces[0].mode, CFG_XDP_NATIVE);
	assert_string_equal(a->pin_dir, "/sys/fs/bpf/leaseline");
	/* Relative to the agent file's directory. */
	assert_string_equal(a->policy_path, policy);
	assert_false(a->has_coordinator);
	assert_true(a->has_metrics);
	assert_string_equal(a->metrics, "127.0.0.1:9475");
	assert_int_equal(a->max_keys, 1048576);
	/* ...and the policy it names is loaded with it. */
	assert_true(o->policy.version == 3);
	assert_int_equal(o->policy.n_limits, 2);
	free(o);
}

static void test_spec_agent_coordinated(void **state)
{
	struct outputs *o = calloc(1, sizeof(*o));
	char path[CFG_PATH_LEN];
	struct cfg_err err;

	(void)state;
	assert_non_null(o);
	fixture(path, sizeof(path), "agent-coordinated.yaml");
	o->policy.version = 99;
	assert_int_equal(cfg_agent_load(path, &o->agent, &o->policy, &err), 0);
	assert_true(o->agent.has_coordinator);
	assert_string_equal(o->agent.coordinator, "127.0.0.1:7450");
	assert_string_equal(o->agent.policy_path, "");
	assert_int_equal(o->agent.n_ifaces, 2);
	assert_string_equal(o->agent.ifaces[1].name, "eth1");
	assert_int_equal(o->agent.ifaces[1].mode, CFG_XDP_GENERIC);
	/* A coordinated agent's policy comes later, from the coordinator. */
	assert_true(o->policy.version == 99);
	/* The policy may be left out altogether. */
	assert_int_equal(cfg_agent_load(path, &o->agent, NULL, &err), 0);
	free(o);
}

/* coordinator: {addresses}: every replica, in order, default port added. */
static void test_agent_replicas(void **state)
{
	struct outputs *o = load_ok(LOAD_AGENT, "agent-replicas.yaml");

	(void)state;
	assert_int_equal(o->agent.n_coordinators, 3);
	assert_string_equal(o->agent.coordinators[0], "127.0.0.1:7450");
	assert_string_equal(o->agent.coordinators[1], "127.0.0.2:7451");
	assert_string_equal(o->agent.coordinators[2], "[::1]:7450");
	assert_string_equal(o->agent.coordinator, "127.0.0.1:7450");
	free(o);
	o = load_ok(LOAD_AGENT, "agent-minimal.yaml");
	assert_int_equal(o->agent.n_coordinators, 1);
	assert_string_equal(o->agent.coordinators[0], "coord.example:7450");
	free(o);
}

static void test_coord_replicas(void **state)
{
	struct outputs *o = load_ok(LOAD_COORD, "coord-replicas.yaml");

	(void)state;
	assert_true(o->coord.has_replicas);
	assert_int_equal(o->coord.replicas.n_etcd, 2);
	assert_string_equal(o->coord.replicas.etcd[0], "http://127.0.0.1:2379");
	assert_string_equal(o->coord.replicas.etcd[1], "http://[::1]:2380");
	assert_string_equal(o->coord.replicas.prefix, "/leaseline/eu");
	assert_string_equal(o->coord.replicas.node, "coord-a");
	assert_string_equal(o->coord.replicas.advertise, "127.0.0.1:7450");
	assert_true(o->coord.replicas.ttl_ns == 6000000000ull);
	assert_string_equal(o->coord.grant_key_path, "/etc/leaseline/grant.key");
	assert_false(o->coord.replicas.tls.set);
	free(o);
	o = load_ok(LOAD_COORD, "coord-replicas-tls.yaml");
	assert_string_equal(o->coord.replicas.etcd[1], "https://10.0.0.6:2379");
	assert_true(o->coord.replicas.tls.set);
	assert_string_equal(o->coord.replicas.tls.ca, "/etc/leaseline/etcd-ca.crt");
	assert_string_equal(o->coord.replicas.tls.key, "/etc/leaseline/coord-a.key");
	free(o);
	o = load_ok(LOAD_COORD, "coord.yaml");
	assert_false(o->coord.has_replicas);
	assert_string_equal(o->coord.replicas.prefix, "/leaseline/default");
	assert_true(o->coord.replicas.ttl_ns == 5000000000ull);
	assert_string_equal(o->coord.grant_key_path, "");
	free(o);
}

static void test_agent_defaults(void **state)
{
	struct outputs *o = load_ok(LOAD_AGENT, "agent-minimal.yaml");
	char host[64] = "";

	(void)state;
	gethostname(host, sizeof(host) - 1);
	assert_string_equal(o->agent.node, host);
	assert_string_equal(o->agent.coordinator, "coord.example:7450");
	assert_string_equal(o->agent.pin_dir, "/sys/fs/bpf/leaseline");
	assert_int_equal(o->agent.max_keys, 1048576);
	assert_int_equal(o->agent.max_flow_keys, 1048576);
	assert_int_equal(o->agent.ifaces[0].mode, CFG_XDP_NATIVE);
	assert_false(o->agent.has_metrics);
	free(o);
}

/* max-flow-keys follows max-keys unless set; 0 (no flow buckets) is allowed. */
static void test_agent_flow_keys(void **state)
{
	struct outputs *o = load_ok(LOAD_AGENT, "agent-max-keys.yaml");

	(void)state;
	assert_int_equal(o->agent.max_keys, 2048);
	assert_int_equal(o->agent.max_flow_keys, 2048);
	free(o);
	o = load_ok(LOAD_AGENT, "agent-no-flow-keys.yaml");
	assert_int_equal(o->agent.max_keys, 2048);
	assert_int_equal(o->agent.max_flow_keys, 0);
	free(o);
}

static void test_spec_coord(void **state)
{
	struct outputs *o = load_ok(LOAD_COORD, "coord.yaml");
	char policy[CFG_PATH_LEN];

	(void)state;
	fixture(policy, sizeof(policy), "policy.yaml");
	assert_string_equal(o->coord.listen, "127.0.0.1:7450");
	assert_string_equal(o->coord.policy_path, policy);
	assert_string_equal(o->coord.state_dir, "/var/lib/leaseline");
	assert_true(o->coord.ttl_ns == 2000000000ULL);
	assert_true(o->coord.refresh_ns == 500000000ULL);
	assert_true(o->coord.has_metrics);
	assert_string_equal(o->coord.metrics, "127.0.0.1:9476");
	assert_int_equal(o->coord.pending_per_address, 4); /* the default */
	assert_string_equal(o->coord.user, "");
	assert_true(o->coord.ledger_retention_s == 400ull * 86400); /* the default */
	assert_int_equal(o->coord.ledger_series_quota, 1u << 20);   /* the default */
	assert_true(o->policy.version == 3);
	free(o);
	o = load_ok(LOAD_COORD, "coord-retention.yaml");
	assert_true(o->coord.ledger_retention_s == 30ull * 86400);
	assert_int_equal(o->coord.ledger_series_quota, 4096);
	free(o);
	o = load_ok(LOAD_COORD, "coord-retention-forever.yaml");
	assert_true(o->coord.ledger_retention_s == 0); /* forever: never pruned */
	free(o);
	/* ledger: a file is relative to the coordinator's file; a URI is kept
	 * as written, and lets replicas meter (they share it)
	 */
	fixture(policy, sizeof(policy), "usage/ledger.db");
	o = load_ok(LOAD_COORD, "coord-ledger-relative.yaml");
	assert_string_equal(o->coord.ledger_path, policy);
	free(o);
	o = load_ok(LOAD_COORD, "coord-replicas-meter-pg.yaml");
	assert_string_equal(o->coord.ledger_path,
			    "postgresql://leaseline:s3cret@db.example:5432/leaseline?sslmode=require");
	assert_true(o->coord.has_replicas);
	free(o);
}

/* A coordinator may lease global limits; lease defaults fill what is left out. */
/* Input caps (walk.h): nesting deeper than WALK_MAX_DEPTH, flow or block, is
 * refused before the document is built (libyaml slows down with depth: 20k
 * levels took 3 s), brackets inside quotes and comments do not count, and a
 * text larger than WALK_MAX_BYTES is refused.
 */
static void test_input_caps(void **state)
{
	struct cfg_policy *p = calloc(1, sizeof(*p));
	size_t len;
	char *text = malloc(4 * WALK_MAX_DEPTH + 256);
	struct cfg_err err;

	(void)state;
	assert_non_null(p);
	assert_non_null(text);
	len = (size_t)sprintf(text, V "limits: ");
	memset(text + len, '[', WALK_MAX_DEPTH + 1);
	len += WALK_MAX_DEPTH + 1;
	memset(text + len, ']', WALK_MAX_DEPTH + 1);
	len += WALK_MAX_DEPTH + 1;
	text[len++] = '\n';
	assert_int_equal(cfg_policy_parse("deep.yaml", text, len, false, p, &err), -EINVAL);
	assert_string_equal(err.msg, "deep.yaml:2:73: nesting deeper than 64 levels (expected a "
				     "flat configuration)");
	/* At the cap: libyaml gets it (and finds it is no list of limits). */
	len = (size_t)sprintf(text, V "limits: ");
	memset(text + len, '[', WALK_MAX_DEPTH);
	len += WALK_MAX_DEPTH;
	memset(text + len, ']', WALK_MAX_DEPTH);
	len += WALK_MAX_DEPTH;
	assert_int_equal(cfg_policy_parse("deep.yaml", text, len, false, p, &err), -EINVAL);
	assert_null(strstr(err.msg, "nesting deeper"));
	/* Brackets in comments and quotes are text: the depth check lets them
	 * through (the name check then refuses the quoted one).
	 */
	len = (size_t)sprintf(
	    text,
	    V "# %s\nlimits: [{name: \"a\", rate: 1, burst: 1}]\n"
	      "rules: [{name: '%s', limits: [a]}]\n",
	    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
	    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[");
	assert_int_equal(cfg_policy_parse("quoted.yaml", text, len, false, p, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "is not a valid name"));
	free(text);
	/* Block nesting on one line ("- - - x") counts as flow nesting does:
	 * 300k levels refused at the 65th, not parsed.
	 */
	text = malloc(2 * 300000 + 64);
	assert_non_null(text);
	len = (size_t)sprintf(text, V "limits:\n");
	for (int i = 0; i < 300000; i++)
		text[len++] = '-', text[len++] = ' ';
	len += (size_t)sprintf(text + len, "x\n");
	assert_int_equal(cfg_policy_parse("block.yaml", text, len, false, p, &err), -EINVAL);
	assert_string_equal(err.msg, "block.yaml:3:129: nesting deeper than 64 levels (expected a "
				     "flat configuration)");
	free(text);
	text = calloc(1, WALK_MAX_BYTES + 2);
	assert_non_null(text);
	memset(text, '#', WALK_MAX_BYTES + 1);
	assert_int_equal(cfg_policy_parse("big.yaml", text, WALK_MAX_BYTES + 1, false, p, &err),
			 -EFBIG);
	assert_string_equal(err.msg,
			    "big.yaml: larger than 1024 KiB (expected a configuration file)");
	free(text);
	free(p);
}

/* Every key mode can be global (reference §6.1), in packets and in bytes. */
static void test_per_key_global_parses(void **state)
{
	static const char *const keys[] = {"src-ip", "dst-ip", "dst-port", "flow"};
	struct cfg_policy *p = calloc(1, sizeof(*p));
	char text[512];
	struct cfg_err err;

	(void)state;
	assert_non_null(p);
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		snprintf(text, sizeof(text),
			 V "limits:\n  - {name: a, key: %s, unit: %s, rate: 100, burst: 10, "
			   "scope: global, on-loss: fallback, fallback: {rate: 5, burst: 1}}\n"
			   "rules:\n  - {name: r, limits: [a]}\n",
			 keys[i], i % 2 ? "bytes" : "packets");
		if (cfg_policy_parse("per-key.yaml", text, strlen(text), false, p, &err))
			fail_msg("key %s: %s", keys[i], err.msg);
		assert_int_equal(p->limits[0].scope, LL_SCOPE_GLOBAL);
		assert_int_equal(p->limits[0].key_mode, LL_KEY_SRC_IP + (int)i);
	}
	free(p);
}

static void test_coord_global_policy(void **state)
{
	struct outputs *o = load_ok(LOAD_COORD, "coord-global.yaml");

	(void)state;
	assert_true(o->coord.ttl_ns == 3000000000ULL);
	assert_true(o->coord.refresh_ns == 500000000ULL);
	assert_string_equal(o->coord.listen, "127.0.0.1:7450");
	assert_false(o->coord.has_metrics);
	assert_int_equal(o->coord.pending_per_address, 64);
	assert_string_equal(o->coord.user, "nobody");
	assert_int_equal(o->policy.limits[0].scope, LL_SCOPE_GLOBAL);
	free(o);
}

static void test_detect_kind(void **state)
{
	static const struct {
		const char *file;
		enum cfg_kind kind;
	} cases[] = {
	    {"policy.yaml", CFG_KIND_POLICY},	    {"policy-global.yaml", CFG_KIND_POLICY},
	    {"agent.yaml", CFG_KIND_AGENT},	    {"agent-coordinated.yaml", CFG_KIND_AGENT},
	    {"agent-minimal.yaml", CFG_KIND_AGENT}, {"coord.yaml", CFG_KIND_COORD},
	    {"coord-refresh.yaml", CFG_KIND_COORD},
	};
	char path[CFG_PATH_LEN];
	enum cfg_kind kind;
	struct cfg_err err;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		fixture(path, sizeof(path), cases[i].file);
		assert_int_equal(cfg_detect_kind(path, &kind, &err), 0);
		if (kind != cases[i].kind)
			fail_msg("%s detected as %d, expected %d", cases[i].file, kind,
				 cases[i].kind);
	}
}

static void test_missing_files(void **state)
{
	struct outputs *o = calloc(1, sizeof(*o));
	char path[CFG_PATH_LEN], want[CFG_PATH_LEN + 64], agent[CFG_PATH_LEN];
	struct cfg_err err;
	int l;

	(void)state;
	assert_non_null(o);
	fixture(path, sizeof(path), "no-such-policy.yaml");
	snprintf(want, sizeof(want), "cannot open '%s': No such file or directory", path);
	for (l = LOAD_POLICY; l <= LOAD_DETECT; l++) {
		assert_int_equal(load((enum loader)l, path, o, &err), -ENOENT);
		assert_string_equal(err.msg, want);
	}
	/* A policy the agent file names but that is not there: said where it is named. */
	fixture(agent, sizeof(agent), "agent-missing-policy.yaml");
	assert_int_equal(cfg_agent_load(agent, &o->agent, &o->policy, &err), -ENOENT);
	expect_msg(&err, agent, "2:9", want);
	/* A directory is not a file. */
	fixture(path, sizeof(path), "");
	assert_int_equal(cfg_policy_load(path, true, &o->policy, &err), -EISDIR);
	free(o);
}

static void test_policy_defaults(void **state)
{
	struct cfg_policy *p = parse_ok(V LIMIT_A, true);

	(void)state;
	assert_int_equal(p->default_action, LL_ACT_PASS);
	assert_int_equal(p->limits[0].key_mode, LL_KEY_NONE);
	assert_int_equal(p->limits[0].prefix_v4, 32);
	assert_int_equal(p->limits[0].prefix_v6, 128);
	assert_int_equal(p->limits[0].unit, LL_UNIT_PACKETS);
	assert_int_equal(p->limits[0].scope, LL_SCOPE_LOCAL);
	assert_int_equal(p->limits[0].mode, LL_MODE_ENFORCE);
	assert_int_equal(p->limits[0].on_loss, LL_ON_LOSS_FAIL_CLOSED);
	assert_int_equal(p->n_rules, 0);
	free(p);
	/* Per-source IPv6 keys aggregate to /64 unless prefix-v6 says (one host
	 * owns a /64); destinations stay per address.
	 */
	p = parse_ok(V "limits:\n  - {name: s, key: src-ip, rate: 1, burst: 1}\n"
		       "  - {name: d, key: dst-ip, rate: 1, burst: 1}\n"
		       "  - {name: t, key: src-ip, prefix-v6: 128, rate: 1, burst: 1}\n",
		     true);
	assert_int_equal(p->limits[0].prefix_v6, 64);
	assert_int_equal(p->limits[1].prefix_v6, 128);
	assert_int_equal(p->limits[2].prefix_v6, 128);
	free(p);
}

/* Rules name limits wherever the limits are in the file. */
static void test_rules_before_limits(void **state)
{
	struct cfg_policy *p = parse_ok("rules:\n  - {name: r, limits: [b, a]}\n" LIMIT_A
					"  - {name: b, rate: 1, burst: 1}\n" V,
					true);

	(void)state;
	assert_int_equal(p->rules[0].limit[0], 1);
	assert_int_equal(p->rules[0].limit[1], 0);
	free(p);
}

static void test_match_forms(void **state)
{
	struct cfg_policy *p =
	    parse_ok(V LIMIT_A "rules:\n"
			       "  - {name: r1, match: {proto: 6, dst-port: '1000-2000'}, "
			       "limits: [a]}\n"
			       "  - {name: r2, match: {src: 10.1.2.3}, limits: [a]}\n"
			       "  - {name: r3, match: {}, limits: [a]}\n"
			       "  - name: r4\n    match:\n    limits: [a]\n"
			       "  - {name: r5, match: {proto: udp, dst-port: 53, src: "
			       "2001:db8::/32, dst: '::1'}, limits: [a]}\n"
			       "  - {name: r6, match: {proto: any, src: 0.0.0.0/0}, limits: [a]}\n",
		     true);

	(void)state;
	assert_int_equal(p->n_rules, 6);
	assert_int_equal(p->rules[0].proto, IPPROTO_TCP);
	assert_true(p->rules[0].dport[0].lo == 1000 && p->rules[0].dport[0].hi == 2000);
	assert_int_equal(p->rules[1].src_plen, 32);
	assert_false(p->rules[2].has_src || p->rules[2].has_dport);
	assert_false(p->rules[3].has_src || p->rules[3].has_dport);
	assert_int_equal(p->rules[4].src_family, 6);
	assert_int_equal(p->rules[4].dst_plen, 128);
	assert_int_equal(p->rules[5].src_plen, 0);
	free(p);
}

/* The matches of issue #13: tcp-flags, icmp-type, dst-port lists. */
static void test_match_new_forms(void **state)
{
	struct cfg_policy *p = parse_ok(
	    V LIMIT_A "rules:\n"
		      "  - {name: t1, match: {proto: tcp, tcp-flags: syn}, limits: [a]}\n"
		      "  - {name: t2, match: {proto: tcp, tcp-flags: 'syn,ack/syn|ack'}, "
		      "limits: [a]}\n"
		      "  - {name: t3, match: {proto: tcp, tcp-flags: 'none/rst'}, limits: [a]}\n"
		      "  - {name: t4, match: {proto: tcp, tcp-flags: 0x02/0x12}, limits: [a]}\n"
		      "  - {name: i1, match: {proto: icmp, icmp-type: echo-request}, "
		      "limits: [a]}\n"
		      "  - {name: i2, match: {proto: icmpv6, icmp-type: [echo-request, 1-4, "
		      "255]}, limits: [a]}\n"
		      "  - {name: p1, match: {proto: udp, dst-port: '53, 80,8000-8100'}, "
		      "limits: [a]}\n"
		      "  - {name: p2, match: {proto: tcp, dst-port: [22, '443', 1000-2000, 1, 2, "
		      "3, 4, 5]}, limits: [a]}\n",
	    true);

	(void)state;
	assert_int_equal(p->n_rules, 8);
	assert_true(p->rules[0].has_tcp_flags && p->rules[0].tcp_mask == 0x12 &&
		    p->rules[0].tcp_value == 0x02);
	assert_true(p->rules[1].tcp_mask == 0x12 && p->rules[1].tcp_value == 0x12);
	assert_true(p->rules[2].tcp_mask == 0x04 && p->rules[2].tcp_value == 0);
	assert_true(p->rules[3].tcp_mask == 0x12 && p->rules[3].tcp_value == 0x02);
	assert_true(p->rules[4].has_icmp && p->rules[4].icmp_types[0] == 1u << 8);
	for (int w = 1; w < 8; w++)
		assert_int_equal(p->rules[4].icmp_types[w], 0);
	assert_int_equal(p->rules[5].icmp_types[0], 0x1eu);    /* 1-4 */
	assert_int_equal(p->rules[5].icmp_types[4], 1u);       /* 128 echo-request */
	assert_int_equal(p->rules[5].icmp_types[7], 1u << 31); /* 255 */
	assert_false(p->rules[0].has_icmp || p->rules[4].has_tcp_flags || p->rules[0].has_dport);
	assert_true(p->rules[6].has_dport && p->rules[6].n_dport == 3);
	assert_true(p->rules[6].dport[0].lo == 53 && p->rules[6].dport[0].hi == 53);
	assert_true(p->rules[6].dport[1].lo == 80 && p->rules[6].dport[2].lo == 8000 &&
		    p->rules[6].dport[2].hi == 8100);
	assert_int_equal(p->rules[7].n_dport, LL_MAX_DPORT_RANGES);
	assert_true(p->rules[7].dport[2].lo == 1000 && p->rules[7].dport[2].hi == 2000 &&
		    p->rules[7].dport[7].lo == 5);
	free(p);
}

/* A coordinator sends its policy's bytes in one message: a policy the
 * parser takes (1024 rules) but the wire does not is refused by the
 * coordinator file, at its policy: line, naming WIRE_MAX_POLICY.
 */
static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_coord_policy_wire_bound(void **state)
{
	char dir[] = "/tmp/ll-wire-XXXXXX", pol[128], co[128], want[512];
	size_t size = 1 << 18, n;
	char *text = malloc(size);
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct cfg_coord *cc = calloc(1, sizeof(*cc));
	struct cfg_err err;

	(void)state;
	assert_non_null(text);
	assert_non_null(cp);
	assert_non_null(cc);
	assert_non_null(mkdtemp(dir));
	snprintf(pol, sizeof(pol), "%s/policy.yaml", dir);
	snprintf(co, sizeof(co), "%s/coord.yaml", dir);
	snprintf(text, size, "listen: 127.0.0.1:7450\npolicy: policy.yaml\nstate-dir: %s\n", dir);
	write_text(co, text);
	n = (size_t)snprintf(text, size, V LIMIT_A "rules:\n");
	for (int i = 0; i < 600; i++)
		n += (size_t)snprintf(
		    text + n, size - n,
		    "  - {name: r%d, match: {proto: udp, dst-port: %d}, limits: [a]}\n", i,
		    10000 + i);
	assert_true(n < 65472);
	write_text(pol, text);
	assert_int_equal(cfg_coord_load(co, cc, cp, &err), 0);
	assert_int_equal(cp->n_rules, 600);
	for (int i = 600; i < LL_MAX_RULES; i++)
		n += (size_t)snprintf(
		    text + n, size - n,
		    "  - {name: r%d, match: {proto: udp, dst-port: %d}, limits: [a]}\n", i,
		    10000 + i);
	write_text(pol, text);
	assert_int_equal(cfg_policy_load(pol, false, cp, &err), 0); /* the parser takes it */
	assert_int_equal(cfg_coord_load(co, cc, cp, &err), -EINVAL);
	snprintf(want, sizeof(want),
		 "policy '%s' is %zu bytes, more than the 65472 a coordinator sends its agents in "
		 "one message (WIRE_MAX_POLICY; expected a smaller policy: fewer or shorter rules)",
		 pol, n);
	expect_msg(&err, co, "2:9", want);
	unlink(pol);
	unlink(co);
	rmdir(dir);
	free(text);
	free(cp);
	free(cc);
}

/* Exactly at each maximum is fine; one more is refused at the item that overflows. */
static void test_maximum_counts(void **state)
{
	size_t size = 1 << 17, n, i;
	char *text = malloc(size);
	struct cfg_policy *p = calloc(1, sizeof(*p));
	struct cfg_err err;

	(void)state;
	assert_non_null(text);
	assert_non_null(p);
	n = (size_t)snprintf(text, size, V "limits:\n");
	for (i = 0; i < LL_MAX_LIMITS; i++)
		n += (size_t)snprintf(text + n, size - n, "  - {name: l%zu, rate: 1, burst: 1}\n",
				      i);
	n += (size_t)snprintf(text + n, size - n, "rules:\n");
	for (i = 0; i < LL_MAX_RULES; i++)
		n += (size_t)snprintf(text + n, size - n,
				      "  - {name: r%zu, limits: [l0, l1, l2, l%zu]}\n", i,
				      i % 253 + 3);
	assert_int_equal(cfg_policy_parse("policy.yaml", text, n, true, p, &err), 0);
	assert_int_equal(p->n_limits, 256);
	assert_int_equal(p->n_rules, LL_MAX_RULES);
	assert_int_equal(p->rules[31].limit[3], 34);
	assert_int_equal(p->rules[252].limit[3], 255); /* the last id a rule's __u8 names */

	/* Rule 1025 is on line 1284: version, limits:, 256 limits, rules:, 1024 rules. */
	n += (size_t)snprintf(text + n, size - n, "  - {name: r99999, limits: [l0]}\n");
	assert_int_equal(cfg_policy_parse("policy.yaml", text, n, true, p, &err), -EINVAL);
	assert_string_equal(err.msg, "policy.yaml:1284:5: too many rules: 1025, the bound is 1024 "
				     "(LL_MAX_RULES: the policy map holds this many in each of its "
				     "two slots; expected at most 1024)");

	n = (size_t)snprintf(text, size, V "limits:\n");
	for (i = 0; i <= LL_MAX_LIMITS; i++)
		n += (size_t)snprintf(text + n, size - n, "  - {name: l%zu, rate: 1, burst: 1}\n",
				      i);
	assert_int_equal(cfg_policy_parse("policy.yaml", text, n, true, p, &err), -EINVAL);
	/* Limit 257 is on line 259: version, limits:, 256 limits. */
	assert_string_equal(
	    err.msg, "policy.yaml:259:5: too many limits: 257, the bound is 256 (LL_MAX_LIMITS: "
		     "a rule names a limit by an 8-bit id, and the pinned per-limit arrays and "
		     "a coordinator report's entries (WIRE_MAX_ENTRIES) hold this many; "
		     "expected at most 256)");
	free(text);
	free(p);
}

static void test_name_bounds(void **state)
{
	struct cfg_policy *p = parse_ok(V "limits:\n  - {name: A_b.c-0123456789012345678901234, "
					  "rate: 100G, burst: 18446743973}\n",
					true);

	(void)state;
	assert_int_equal(strlen(p->limits[0].name), LL_NAME_LEN - 1);
	assert_true(p->limits[0].rate == TB_MAX_RATE);
	assert_true(p->limits[0].burst == TB_MAX_BURST);
	free(p);
}

static void test_names_of_values(void **state)
{
	(void)state;
	assert_string_equal(cfg_key_mode_name(LL_KEY_DST_PORT), "dst-port");
	assert_string_equal(cfg_unit_name(LL_UNIT_BYTES), "bytes");
	assert_string_equal(cfg_mode_name(LL_MODE_SHADOW), "shadow");
	assert_string_equal(cfg_scope_name(LL_SCOPE_GLOBAL), "global");
	assert_string_equal(cfg_on_loss_name(LL_ON_LOSS_FAIL_OPEN), "fail-open");
	assert_string_equal(cfg_action_name(LL_ACT_DROP), "drop");
	assert_string_equal(cfg_xdp_mode_name(CFG_XDP_AUTO), "auto");
	assert_string_equal(cfg_proto_name(IPPROTO_ICMPV6), "icmpv6");
	assert_null(cfg_proto_name(47));
}

static void test_null_err_is_allowed(void **state)
{
	struct cfg_policy *p = calloc(1, sizeof(*p));

	(void)state;
	assert_non_null(p);
	assert_int_equal(cfg_policy_parse("x", "version: 0\n", 11, true, p, NULL), -EINVAL);
	assert_int_equal(cfg_policy_parse("x", NULL, 0, true, p, NULL), -EINVAL);
	free(p);
}

/* Overrides: a file of per-key contracts, every line checked where it is. */
/* Each bad line follows a good entry: before the first, an error shows none
 * of the line (test_list_file_trust).
 */
static void test_overrides_file(void **state)
{
	static const struct {
		const char *name, *text, *at, *msg;
	} bad[] = {
	    {"host bits", "198.18.99.0/24 deny\n198.18.1.1/24 rate 10 burst 20\n", "2:1",
	     "prefix '198.18.1.1/24' has host bits set (did you mean 198.18.1.0/24?)"},
	    {"not a prefix", "198.18.99.0/24 deny\n# c\n\nfoo rate 1 burst 1\n", "4:1",
	     "'foo' is not an address prefix (expected e.g. 198.18.1.0/24 or 2001:db8::/48)"},
	    {"longer than the key", "198.18.99.0/24 deny\n198.18.1.0/25 deny\n", "2:1",
	     "prefix '198.18.1.0/25' is longer than the limit's key (prefix-v4 24): an override "
	     "covers whole keys"},
	    {"no contract", "198.18.99.0/24 deny\n198.18.1.0/24\n", "2:14",
	     "'198.18.1.0/24' needs a contract: rate R burst B, unlimited or deny"},
	    {"bad contract", "198.18.99.0/24 deny\n198.18.1.0/24 allow\n", "2:15",
	     "'allow' is not a contract (expected rate R burst B, unlimited or deny)"},
	    {"rate zero", "198.18.99.0/24 deny\n198.18.1.0/24 rate 0 burst 1\n", "2:20",
	     "rate '0' is not a count from 1 to 100000000000 (k, M, G allowed)"},
	    {"no burst", "198.18.99.0/24 deny\n198.18.1.0/24 rate 5\n", "2:21",
	     "expected 'burst B' after the rate"},
	    {"trailing", "198.18.99.0/24 deny\n198.18.1.0/24 deny now\n", "2:20",
	     "unexpected 'now' after the contract"},
	    {"twice",
	     "198.18.99.0/24 deny\n198.18.1.0/24 deny\n198.18.2.0/24 deny\n198.18.1.0/24 "
	     "unlimited\n",
	     "4", "the same prefix again (first on line 2)"},
	};
	char dir[] = "/tmp/ll-ovr-XXXXXX", pol[128], ovr[128], text[512];
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct cfg_err err;
	FILE *f;

	(void)state;
	assert_non_null(cp);
	assert_non_null(mkdtemp(dir));
	snprintf(pol, sizeof(pol), "%s/policy.yaml", dir);
	snprintf(ovr, sizeof(ovr), "%s/tiers.txt", dir);
	snprintf(text, sizeof(text),
		 V "limits:\n  - {name: a, key: src-ip, prefix-v4: 24, rate: 5, burst: 10, "
		   "overrides: tiers.txt}\n");
	f = fopen(pol, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		f = fopen(ovr, "w");
		assert_non_null(f);
		fputs(bad[i].text, f);
		fclose(f);
		memset(&err, 0, sizeof(err));
		if (cfg_policy_load(pol, true, cp, &err) != -EINVAL)
			fail_msg("%s: accepted", bad[i].name);
		expect_msg(&err, ovr, bad[i].at, bad[i].msg);
	}
	/* A good one: counted; v6 too. */
	f = fopen(ovr, "w");
	assert_non_null(f);
	fputs("198.18.1.0/24 rate 10k burst 20k\n198.18.2.0/24 unlimited\n198.18.3.0/24 deny\n"
	      "2001:db8::/48 rate 5 burst 5  # a comment\n",
	      f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), 0);
	assert_int_equal(cp->limits[0].n_overrides, 4);
	assert_string_equal(cp->limits[0].overrides, ovr);
	/* Only for an address key of a local limit; a file that is not there. */
	snprintf(text, sizeof(text),
		 V "limits:\n  - {name: a, key: flow, rate: 5, burst: 10, overrides: tiers.txt}\n");
	f = fopen(pol, "w");
	fputs(text, f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	expect_msg(&err, pol, "3:46",
		   "limit 'a': overrides apply only to key src-ip, dst-ip or dst-port (key is "
		   "'flow')");
	snprintf(
	    text, sizeof(text),
	    V "limits:\n  - {name: a, key: src-ip, scope: global, rate: 5, burst: 10, overrides: "
	      "tiers.txt}\n");
	f = fopen(pol, "w");
	fputs(text, f);
	fclose(f);
	/* Global: one key per override (the tiers file above has /24s of /32 keys). */
	assert_int_equal(cfg_policy_load(pol, false, cp, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "on a scope: global limit an override names one key: its "
					"prefix must be /32 (the limit's prefix-v4), not /24"));
	f = fopen(ovr, "w");
	fputs("198.18.1.7 rate 10 burst 10\n", f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, false, cp, &err), 0);
	assert_int_equal(cp->limits[0].n_overrides, 1);
	/* A served policy's global overrides are the coordinator's: not read. */
	unlink(ovr);
	assert_int_equal(cfg_policy_parse_served(text, strlen(text), cp, &err), 0);
	snprintf(text, sizeof(text),
		 V "limits:\n  - {name: a, key: src-ip, scope: global, on-loss: fallback, "
		   "fallback: {rate: 1, burst: 1}, rate: 5, burst: 10, overrides: tiers.txt}\n");
	f = fopen(pol, "w");
	fputs(text, f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, false, cp, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "with on-loss: fallback are not supported"));
	assert_int_equal(cfg_policy_load(pol, false, cp, &err), -EINVAL);
	unlink(pol);
	rmdir(dir);
	free(cp);
}

/* A list file is the file its path names, and what it holds is shown only
 * once it has proved to be a list: a policy naming /etc/shadow, or a path
 * through a symbolic link, learns nothing of the file.
 */
static void test_list_file_trust(void **state)
{
	char dir[] = "/tmp/ll-lft-XXXXXX", pol[128], set[128], real[128], link[160], sub[128],
	     text[512];
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct cfg_err err;
	FILE *f;

	(void)state;
	assert_non_null(cp);
	assert_non_null(mkdtemp(dir));
	snprintf(pol, sizeof(pol), "%s/policy.yaml", dir);
	snprintf(set, sizeof(set), "%s/deny.txt", dir);
	snprintf(text, sizeof(text),
		 V "limits:\n  - {name: a, key: src-ip, rate: 5, burst: 10}\n"
		   "rules:\n  - {name: r, match: {src-set: deny.txt}, limits: [a]}\n");
	f = fopen(pol, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	/* Not a list at all: the error names the place, none of the text. */
	f = fopen(set, "w");
	assert_non_null(f);
	fputs("root:$6$secret:19000:0:99999:7:::\n", f);
	fclose(f);
	memset(&err, 0, sizeof(err));
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	expect_msg(&err, set, "1:1",
		   "does not parse as the prefix set, nor did any line before it (its text is not "
		   "shown)");
	assert_null(strstr(err.msg, "secret"));
	assert_null(strstr(err.msg, "root"));
	/* After a good entry, the bad line is shown as always. */
	f = fopen(set, "w");
	fputs("198.18.1.0/24\nroot:x\n", f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "'root:x' is not an address prefix"));
	/* A symbolic link, as the file or on its path, is refused. */
	snprintf(real, sizeof(real), "%s/real.txt", dir);
	f = fopen(real, "w");
	fputs("198.18.1.0/24\n", f);
	fclose(f);
	unlink(set);
	assert_int_equal(symlink(real, set), 0);
	memset(&err, 0, sizeof(err));
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	assert_non_null(strstr(err.msg, ": cannot read the prefix set: a symbolic link is on its "
					"path (name the file itself)"));
	unlink(set);
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	snprintf(link, sizeof(link), "%s/sub/deny.txt", dir);
	rename(real, link);
	snprintf(real, sizeof(real), "%s/via", dir);
	assert_int_equal(symlink(sub, real), 0);
	snprintf(text, sizeof(text),
		 V "limits:\n  - {name: a, key: src-ip, rate: 5, burst: 10}\n"
		   "rules:\n  - {name: r, match: {src-set: via/deny.txt}, limits: [a]}\n");
	f = fopen(pol, "w");
	fputs(text, f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	assert_non_null(
	    strstr(err.msg, "via/deny.txt: cannot read the prefix set: a symbolic link"));
	/* The file itself, by its own path: read. */
	snprintf(text, sizeof(text),
		 V "limits:\n  - {name: a, key: src-ip, rate: 5, burst: 10}\n"
		   "rules:\n  - {name: r, match: {src-set: sub/deny.txt}, limits: [a]}\n");
	f = fopen(pol, "w");
	fputs(text, f);
	fclose(f);
	if (cfg_policy_load(pol, true, cp, &err))
		fail_msg("%s", err.msg);
	unlink(real);
	unlink(link);
	rmdir(sub);
	unlink(pol);
	rmdir(dir);
	free(cp);
}

/* A policy file that is a FIFO is refused at once, never opened for
 * blocking: on a coordinator's SIGHUP it held the event loop until some
 * writer came. (alarm: a blocking open fails the test instead of hanging.)
 */
static void test_fifo_policy_refused(void **state)
{
	char dir[] = "/tmp/ll-fifo-XXXXXX", path[64], want[128];
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct cfg_err err;

	(void)state;
	assert_non_null(cp);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/policy.yaml", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	alarm(10);
	assert_int_equal(cfg_policy_load(path, false, cp, &err), -EINVAL);
	alarm(0);
	snprintf(want, sizeof(want), "cannot read '%s': not a regular file", path);
	assert_string_equal(err.msg, want);
	unlink(path);
	rmdir(dir);
	free(cp);
}

/* Prefix sets: every bad line of a set file at its place; one file named
 * twice is one set; the bound on the prefixes of all sets at the line past it.
 */
static void test_set_files(void **state)
{
	static const struct {
		const char *name, *text, *at, *msg;
	} bad[] = {
	    {"host bits", "198.18.99.0/24\n198.18.1.0/24\n198.18.2.1/24\n", "3:1",
	     "prefix '198.18.2.1/24' has host bits set (did you mean 198.18.2.0/24?)"},
	    {"v6 host bits", "198.18.99.0/24\n# c\n  2001:db8::1/48\n", "3:3",
	     "prefix '2001:db8::1/48' has host bits set (did you mean 2001:db8::/48?)"},
	    {"not a prefix", "198.18.99.0/24\n\n198.18.1.0/24\nfoo\n", "4:1",
	     "'foo' is not an address prefix (expected e.g. 198.18.1.0/24, 198.18.1.7 or "
	     "2001:db8::/48)"},
	    {"too long", "198.18.99.0/24\n198.18.1.0/33\n", "2:1",
	     "prefix '198.18.1.0/33' is longer than its family's /32 or /128"},
	    {"two on a line", "198.18.99.0/24\n198.18.1.0/24 198.18.2.0/24\n", "2:15",
	     "unexpected '198.18.2.0/24' after the prefix (one prefix a line; '#' starts a "
	     "comment)"},
	    {"v6 over v4", "198.18.99.0/24\n::/0\n", "2:1",
	     "prefix '::/0' covers ::ffff:0:0/96, where IPv4 addresses are held: it would match "
	     "every IPv4 packet too (expected IPv6 prefixes beside it, e.g. 2000::/3, and "
	     "0.0.0.0/0 for IPv4)"},
	    {"twice", "198.18.99.0/24\n198.18.1.0/24\n2001:db8::/32\n198.18.1.0/24 # again\n",
	     "4:1", "the same prefix again (first on line 2)"},
	};
	char dir[] = "/tmp/ll-set-XXXXXX", pol[128], set[128], text[512];
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct cfg_err err;
	FILE *f;

	(void)state;
	assert_non_null(cp);
	assert_non_null(mkdtemp(dir));
	snprintf(pol, sizeof(pol), "%s/policy.yaml", dir);
	snprintf(set, sizeof(set), "%s/deny.txt", dir);
	snprintf(text, sizeof(text),
		 V LIMIT_A "rules:\n  - {name: d, match: {src-set: deny.txt}, action: drop}\n"
			   "  - {name: p, match: {dst-set: deny.txt, proto: udp}, action: pass}\n"
			   "  - {name: r, limits: [a]}\n");
	f = fopen(pol, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		f = fopen(set, "w");
		assert_non_null(f);
		fputs(bad[i].text, f);
		fclose(f);
		memset(&err, 0, sizeof(err));
		if (cfg_policy_load(pol, true, cp, &err) != -EINVAL)
			fail_msg("%s: accepted", bad[i].name);
		expect_msg(&err, set, bad[i].at, bad[i].msg);
	}
	/* A line past LINE_FILE_MAX, and a file that is not a regular one
	 * (a FIFO would block the reader): refused, nothing read.
	 */
	f = fopen(set, "w");
	fprintf(f, "198.18.1.0/24\n%0600d\n", 0);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	expect_msg(&err, set, "2", "line longer than 512 bytes");
	unlink(set);
	assert_int_equal(mkfifo(set, 0600), 0);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "cannot read the prefix set: not a regular file"));
	unlink(set);
	/* A good one, named twice: one set. */
	f = fopen(set, "w");
	fputs("# deny\n198.18.1.0/24\n198.18.1.7\n2001:db8::/32  # v6\n\n", f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), 0);
	assert_int_equal(cp->n_sets, 1);
	assert_int_equal(cp->sets[0].n, 3);
	assert_string_equal(cp->sets[0].path, set);
	assert_int_equal(cp->rules[0].src_set, 1);
	assert_int_equal(cp->rules[1].dst_set, 1);
	assert_int_equal(cp->rules[0].action, LL_RULE_DROP);
	assert_int_equal(cp->rules[1].action, LL_RULE_PASS);
	assert_int_equal(cp->rules[2].action, LL_RULE_LIMIT);
	assert_int_equal(cp->rules[0].n_limits, 0);
	/* Past the bound: the first prefix over it, at its line. */
	f = fopen(set, "w");
	for (int i = 0; i <= LL_MAX_SET_ENTRIES; i++)
		fprintf(f, "2001:db8:%x:%x::/64\n", i >> 16, i & 0xffff);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	snprintf(text, sizeof(text), "%d:1", LL_MAX_SET_ENTRIES + 1);
	expect_msg(&err, set, text,
		   "one prefix too many: the sets of one policy hold at most 262144 prefixes in "
		   "all (LL_MAX_SET_ENTRIES: ll_sets holds two policies' worth, so a reload can "
		   "write new sets beside the running ones; 0 are in the policy's other sets)");
	/* A file that is not there: at the key that names it. */
	unlink(set);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "cannot read the prefix set: No such file or directory"));
	assert_non_null(strstr(err.msg, "policy.yaml:5:32: rule 'd' match: "));
	/* Actions: limits only with action limit; a limit rule needs them. */
	snprintf(text, sizeof(text),
		 V LIMIT_A
		 "rules:\n  - {name: d, match: {proto: udp}, action: drop, limits: [a]}\n");
	f = fopen(pol, "w");
	fputs(text, f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	expect_msg(&err, pol, "5:50",
		   "rule 'd': limits apply only to action limit (action is 'drop': it charges "
		   "nothing; expected no limits, or action: limit)");
	snprintf(text, sizeof(text), V LIMIT_A "rules:\n  - {name: d, action: deny}\n");
	f = fopen(pol, "w");
	fputs(text, f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "policy.yaml:5:23: "));
	unlink(pol);
	rmdir(dir);
	free(cp);
}

/* Overrides of a dst-port limit: ports and ranges, each line checked where
 * it is, overlapping ranges refused at the later line; local only.
 */
static void test_port_overrides_file(void **state)
{
	static const struct {
		const char *name, *text, *at, *msg;
	} bad[] = {
	    {"not a port", "9999 deny\n53 deny\nhttp deny\n", "3:1",
	     "'http' is not a port or port range (expected e.g. 53 or 8000-8100; ports "
	     "0..65535, low <= high)"},
	    {"above 65535", "9999 deny\n65536 deny\n", "2:1",
	     "'65536' is not a port or port range (expected e.g. 53 or 8000-8100; ports "
	     "0..65535, low <= high)"},
	    {"reversed", "9999 deny\n9000-8000 deny\n", "2:1",
	     "'9000-8000' is not a port or port range (expected e.g. 53 or 8000-8100; ports "
	     "0..65535, low <= high)"},
	    {"no contract", "9999 deny\n53\n", "2:3",
	     "'53' needs a contract: rate R burst B, unlimited or deny"},
	    {"overlap", "9999 deny\n8000-8100 deny\n# x\n53 unlimited\n8100 rate 5 burst 5\n",
	     "5:1", "ports 8100-8100 overlap ports 8000-8100 of line 2"},
	    {"twice", "9999 deny\n53 deny\n53 unlimited\n", "3:1",
	     "ports 53-53 overlap ports 53-53 of line 2"},
	};
	char dir[] = "/tmp/ll-povr-XXXXXX", pol[128], ovr[128], text[512];
	struct cfg_policy *cp = calloc(1, sizeof(*cp));
	struct cfg_err err;
	FILE *f;

	(void)state;
	assert_non_null(cp);
	assert_non_null(mkdtemp(dir));
	snprintf(pol, sizeof(pol), "%s/policy.yaml", dir);
	snprintf(ovr, sizeof(ovr), "%s/ports.txt", dir);
	snprintf(
	    text, sizeof(text),
	    V "limits:\n  - {name: a, key: dst-port, rate: 5, burst: 10, overrides: ports.txt}\n");
	f = fopen(pol, "w");
	fputs(text, f);
	fclose(f);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		f = fopen(ovr, "w");
		fputs(bad[i].text, f);
		fclose(f);
		memset(&err, 0, sizeof(err));
		if (cfg_policy_load(pol, true, cp, &err) != -EINVAL)
			fail_msg("%s: accepted", bad[i].name);
		expect_msg(&err, ovr, bad[i].at, bad[i].msg);
	}
	f = fopen(ovr, "w");
	fputs("53 rate 10k burst 20k\n0-1023 deny\n", f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), -EINVAL); /* 53 is in 0-1023 */
	f = fopen(ovr, "w");
	fputs("53 rate 10k burst 20k\n1024-65535 unlimited\n8 deny\n", f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, true, cp, &err), 0);
	/* The blocks: 53, 8, and 1024-65535 as 6 aligned blocks (1024, 2048,
	 * ..., 32768 wide).
	 */
	assert_int_equal(cp->limits[0].n_overrides, 8);
	snprintf(text, sizeof(text),
		 V "limits:\n  - {name: a, key: dst-port, scope: global, rate: 5, burst: 10, "
		   "overrides: ports.txt}\n");
	f = fopen(pol, "w");
	fputs(text, f);
	fclose(f);
	assert_int_equal(cfg_policy_load(pol, false, cp, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "overrides of a key: dst-port limit apply only to scope "
					"local"));
	unlink(ovr);
	unlink(pol);
	rmdir(dir);
	free(cp);
}

int main(void)
{
	static const struct CMUnitTest plain[] = {
	    cmocka_unit_test(test_spec_policy),
	    cmocka_unit_test(test_coordinator_policy),
	    cmocka_unit_test(test_meter_parsed),
	    cmocka_unit_test(test_spec_agent_standalone),
	    cmocka_unit_test(test_spec_agent_coordinated),
	    cmocka_unit_test(test_agent_replicas),
	    cmocka_unit_test(test_coord_replicas),
	    cmocka_unit_test(test_agent_defaults),
	    cmocka_unit_test(test_agent_flow_keys),
	    cmocka_unit_test(test_spec_coord),
	    cmocka_unit_test(test_per_key_global_parses),
	    cmocka_unit_test(test_input_caps),
	    cmocka_unit_test(test_coord_global_policy),
	    cmocka_unit_test(test_detect_kind),
	    cmocka_unit_test(test_missing_files),
	    cmocka_unit_test(test_policy_defaults),
	    cmocka_unit_test(test_rules_before_limits),
	    cmocka_unit_test(test_match_forms),
	    cmocka_unit_test(test_match_new_forms),
	    cmocka_unit_test(test_coord_policy_wire_bound),
	    cmocka_unit_test(test_maximum_counts),
	    cmocka_unit_test(test_name_bounds),
	    cmocka_unit_test(test_names_of_values),
	    cmocka_unit_test(test_null_err_is_allowed),
	    cmocka_unit_test(test_overrides_file),
	    cmocka_unit_test(test_set_files),
	    cmocka_unit_test(test_list_file_trust),
	    cmocka_unit_test(test_fifo_policy_refused),
	    cmocka_unit_test(test_port_overrides_file),
	};
	size_t n = ARRAY_SIZE(plain) + ARRAY_SIZE(text_cases) + ARRAY_SIZE(file_cases), k, i;
	struct CMUnitTest *tests = calloc(n, sizeof(*tests));
	int failed;

	if (!tests)
		return 1;
	memcpy(tests, plain, sizeof(plain));
	k = ARRAY_SIZE(plain);
	for (i = 0; i < ARRAY_SIZE(text_cases); i++, k++) {
		tests[k].name = text_cases[i].name;
		tests[k].test_func = run_text_case;
		tests[k].initial_state = (void *)&text_cases[i];
	}
	for (i = 0; i < ARRAY_SIZE(file_cases); i++, k++) {
		tests[k].name = file_cases[i].name;
		tests[k].test_func = run_file_case;
		tests[k].initial_state = (void *)&file_cases[i];
	}
	failed = _cmocka_run_group_tests("config", tests, n, NULL, NULL);
	free(tests);
	return failed;
}
