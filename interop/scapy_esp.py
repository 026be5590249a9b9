#!/usr/bin/python3
"""ESP with Scapy 2.5 as the peer of sluice's `sluice pcap encrypt|decrypt`.

Run it with /usr/bin/python3 (Debian's interpreter, which sees python3-scapy).

    scapy_esp.py encrypt --sa FILE [--spi N] IN.pcap OUT.pcap
    scapy_esp.py decrypt --sa FILE [--spi N] [--json] IN.pcap OUT.pcap
    scapy_esp.py batch JOBS.json

encrypt protects every IP packet of IN.pcap with Scapy's SecurityAssociation
and writes the ESP packets; decrypt opens the ESP packets of IN.pcap and
writes the inner packets (tunnel mode) or the rebuilt IP packets (transport
mode). batch runs a JSON list of such jobs
([{"op": "encrypt", "sa": F, "spi": N, "in": F, "out": F}, ...]) in one process,
because starting Python and importing Scapy costs more than most jobs, and
prints a JSON list of results, one per job, in order.

The SA file is sluice's TOML SA file (read with tomllib); the SA is the one
with --spi, or the only one. seq is the last sequence number sent, so the
first packet encrypted carries seq + 1; for decrypt it is the highest
received, from which the ESN high bits are inferred (RFC 4303 Appendix A).

Input pcaps may be raw IP (link types 101, 12, 14, 228, 229) or Ethernet (1);
output pcaps are raw IP (LINKTYPE_RAW, 101), with the input's timestamps.
IVs are derived from the key and sequence number (never equal to it), so the
same input gives the same output: a failure replays exactly.

Faults of Scapy 2.5 worked around here:
  * ESN is ignored in the ICV of CBC+HMAC and NULL+HMAC SAs (AuthAlgo.sign and
    verify drop esn for ESP): such SAs are refused (exit status 3, or
    "unsupported" in a batch result) instead of producing wrong packets.
  * The NAT-T UDP length stays 8: it is deleted and the packet rebuilt.
  * decrypt() modifies the packet it is given: it gets a copy.
  * decrypt() in transport mode over IPv6 with NAT-T sets "nh" on the UDP
    header and keeps it: ESP-in-UDP is unwrapped to plain ESP first (the ICV
    covers only the ESP packet, so this changes nothing that is verified).
  * seq_num=0 and esn=0 passed to encrypt() mean "use the SA's": the SA's
    counters are set per packet instead.

JSON of decrypt: {"processed": N, "ok": N, "dropped": {reason: count},
"packets": [{"index": i, "ok": bool, "reason": str, "spi": N, "seq": N,
"nh": N, "error": str}]}. Reasons: auth_failed, unknown_spi, malformed,
not_esp, error. Exit status: 0, 1 (decrypt with drops and --strict), 2
(usage or bad input), 3 (unsupported by Scapy).
"""

import argparse
import hashlib
import json
import socket
import struct
import sys
import tomllib

from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.ipsec import ESP, IPSecIntegrityError, SecurityAssociation
from scapy.packet import Raw
from scapy.utils import RawPcapReader, RawPcapWriter

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
RAW_LINKTYPES = (LINKTYPE_RAW, 12, 14, 228, 229)

# sluice (strongSwan) keyword -> (Scapy crypt_algo, Scapy auth_algo, AEAD).
# Scapy 2.5's AES-GCM takes 16-, 24- and 32-byte keys, so GCM-192 is covered.
SUITES = {
    "aes128gcm16": ("AES-GCM", None, True),
    "aes192gcm16": ("AES-GCM", None, True),
    "aes256gcm16": ("AES-GCM", None, True),
    "chacha20poly1305": ("CHACHA20-POLY1305", None, True),
    "aes128-sha256": ("AES-CBC", "SHA2-256-128", False),
    "aes256-sha256": ("AES-CBC", "SHA2-256-128", False),
    "aes128-sha384": ("AES-CBC", "SHA2-384-192", False),
    "aes256-sha384": ("AES-CBC", "SHA2-384-192", False),
    "aes128-sha512": ("AES-CBC", "SHA2-512-256", False),
    "aes256-sha512": ("AES-CBC", "SHA2-512-256", False),
    "null-sha256": ("NULL", "SHA2-256-128", False),
}

MASK32 = 0xFFFFFFFF


class Unsupported(Exception):
    """A combination Scapy 2.5 cannot do correctly."""


class BadInput(Exception):
    """A bad SA file, pcap or argument."""


def unhex(s):
    s = s or ""
    if s[:2] in ("0x", "0X"):
        s = s[2:]
    return bytes.fromhex(s)


def load_sa(path, spi=None):
    """Returns the [[sa]] table with the SPI, or the only one."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise BadInput("%s: %s" % (path, e))
    sas = doc.get("sa", [])
    if spi is not None:
        sas = [s for s in sas if s.get("spi") == spi]
    if len(sas) != 1:
        raise BadInput("%s: want exactly one SA%s, found %d" % (
            path, "" if spi is None else " with spi 0x%x" % spi, len(sas)))
    sa = dict(sas[0])
    sa.setdefault("mode", "tunnel")
    sa.setdefault("encap", "none")
    sa.setdefault("esn", False)
    sa.setdefault("seq", 0)
    sa.setdefault("sport", 4500)
    sa.setdefault("dport", 4500)
    if sa.get("esp") not in SUITES:
        raise Unsupported("suite %r is not one Scapy is driven with here" % sa.get("esp"))
    return sa


def ip_class(addr):
    return IPv6 if ":" in addr else IP


def make_sa(sa):
    """Builds Scapy's SecurityAssociation for an SA table."""
    crypt, auth, aead = SUITES[sa["esp"]]
    if sa["esn"] and not aead:
        raise Unsupported(
            "Scapy 2.5 ignores ESN in the ICV of %s (CBC/NULL + HMAC) SAs" % sa["esp"])
    tunnel = None
    if sa["mode"] == "tunnel":
        tunnel = ip_class(sa["src"])(src=sa["src"], dst=sa["dst"])
    natt = None
    if sa["encap"] == "udp":
        natt = UDP(sport=sa["sport"], dport=sa["dport"])
    kw = {}
    if crypt != "NULL":
        kw["crypt_algo"] = crypt
        kw["crypt_key"] = unhex(sa.get("enc_key"))
    if auth:
        kw["auth_algo"] = auth
        kw["auth_key"] = unhex(sa.get("auth_key"))
    return SecurityAssociation(ESP, spi=sa["spi"], tunnel_header=tunnel,
                               nat_t_header=natt, esn_en=sa["esn"], **kw)


def iv_for(sa, scapy_sa, seq):
    """A per-packet IV: deterministic, unique per (key, seq), never seq."""
    n = scapy_sa.crypt_algo.iv_size
    if n == 0:
        return None
    seed = unhex(sa.get("enc_key")) + struct.pack("!IQ", sa["spi"], seq)
    return hashlib.sha256(b"sluice-interop-iv" + seed).digest()[:n]


def read_pcap(path):
    """Yields (ip_bytes, sec, usec) for each packet, and the link type."""
    try:
        reader = RawPcapReader(path)
    except Exception as e:  # Scapy raises its own exception types
        raise BadInput("%s: %s" % (path, e))
    lt = reader.linktype
    if lt not in RAW_LINKTYPES and lt != LINKTYPE_ETHERNET:
        raise BadInput("%s: link type %d is neither raw IP nor Ethernet" % (path, lt))
    pkts = []
    try:
        for data, meta in reader:
            if lt == LINKTYPE_ETHERNET:
                data = data[14:] if len(data) >= 14 else b""
            pkts.append((data, meta.sec, meta.usec))
    finally:
        reader.close()
    return pkts


def write_pcap(path, pkts):
    w = RawPcapWriter(path, linktype=LINKTYPE_RAW)
    try:
        w.write_header(None)
        for data, sec, usec in pkts:
            w.write_packet(data, sec=sec, usec=usec)
    finally:
        w.close()


def dissect(b):
    if b and b[0] >> 4 == 4:
        return IP(b)
    if b and b[0] >> 4 == 6:
        return IPv6(b)
    return None


def fix_natt(pkt):
    """Scapy 2.5 leaves the NAT-T UDP length at 8: recompute it. IPv4 keeps
    the zero checksum RFC 3948 section 2.1 asks for; IPv6 gets a real one
    (RFC 8200 section 8.1)."""
    udp = pkt[UDP]
    del udp.len
    if pkt.version == 6:
        del udp.chksum
    else:
        udp.chksum = 0
    return pkt.__class__(bytes(pkt))


def encrypt(sa, pkts):
    """Encrypts raw IP packets; returns the ESP packets."""
    s = make_sa(sa)
    out = []
    seq = sa["seq"]
    for i, (b, sec, usec) in enumerate(pkts):
        seq += 1
        if not sa["esn"] and seq > MASK32:
            raise BadInput("packet %d: sequence number %d needs ESN" % (i, seq))
        p = dissect(b)
        if p is None:
            raise BadInput("packet %d is not IPv4 or IPv6" % i)
        # encrypt(seq_num=0) and encrypt(esn=0) fall back to the SA's values,
        # so the SA's own counters carry the number.
        s.seq_num = seq & MASK32
        s.esn = seq >> 32
        e = s.encrypt(p, iv=iv_for(sa, s, seq))
        if sa["encap"] == "udp":
            e = fix_natt(e)
        out.append((bytes(e), sec, usec))
    return out


def unwrap_udp(p, ports):
    """Turns ESP-in-UDP (RFC 3948) into plain ESP, or returns a reason."""
    if UDP not in p:
        return None, "not_esp"
    udp = p[UDP]
    if udp.sport not in ports and udp.dport not in ports:
        return None, "not_esp"
    esp = bytes(udp.payload)
    if len(esp) < 8 or esp[:4] == b"\0\0\0\0":
        return None, "not_esp"  # keepalive or IKE
    hdr = p.copy()
    hdr.remove_payload()
    if p.version == 4:
        hdr.proto = socket.IPPROTO_ESP
        del hdr.len
        del hdr.chksum
    else:
        hdr.nh = socket.IPPROTO_ESP
        del hdr.plen
    return p.__class__(bytes(hdr / Raw(esp))), None


class SeqTracker:
    """Infers the ESN high bits (RFC 4303 Appendix A, without a window)."""

    def __init__(self, highest):
        self.t = highest

    def infer(self, lo):
        th = self.t >> 32
        best = None
        for hi in (th - 1, th, th + 1):
            if hi < 0:
                continue
            c = hi << 32 | lo
            if best is None or abs(c - self.t) < abs(best - self.t):
                best = c
        return best

    def update(self, seq):
        self.t = max(self.t, seq)


def decrypt(sa, pkts):
    """Decrypts ESP packets; returns (inner packets, per-packet results)."""
    s = make_sa(sa)
    ports = (sa["sport"], sa["dport"])
    tracker = SeqTracker(sa["seq"])
    out, results = [], []
    for i, (b, sec, usec) in enumerate(pkts):
        r = {"index": i, "ok": False}
        results.append(r)
        try:
            p = dissect(b)
            if p is None:
                r["reason"] = "malformed"
                continue
            if sa["encap"] == "udp":
                p, why = unwrap_udp(p, ports)
                if why:
                    r["reason"] = why
                    continue
            if ESP not in p:
                r["reason"] = "not_esp"
                continue
            esp = p[ESP]
            r["spi"], lo = esp.spi, esp.seq
            if esp.spi != sa["spi"]:
                r["reason"] = "unknown_spi"
                continue
            seq = tracker.infer(lo) if sa["esn"] else lo
            r["seq"] = seq
            s.esn = seq >> 32
            try:
                inner = s.decrypt(p.copy())  # decrypt() modifies its argument
            except IPSecIntegrityError as e:
                r["reason"] = "auth_failed"
                r["error"] = str(e)[:200]
                continue
            tracker.update(seq)
            r["ok"] = True
            r["nh"] = inner.proto if inner.version == 4 else inner.nh
            out.append((bytes(inner), sec, usec))
        except Exception as e:  # a peer's crash on one packet is a result
            r["reason"] = "error"
            r["error"] = "%s: %s" % (type(e).__name__, e)
    return out, results


def summary(results):
    dropped = {}
    for r in results:
        if not r["ok"]:
            dropped[r["reason"]] = dropped.get(r["reason"], 0) + 1
    return {"processed": len(results), "ok": len(results) - sum(dropped.values()),
            "dropped": dropped}


def run_job(job):
    """Runs one encrypt or decrypt job; returns its result (never raises)."""
    res = {"op": job.get("op"), "in": job.get("in"), "out": job.get("out")}
    try:
        sa = load_sa(job["sa"], job.get("spi"))
        pkts = read_pcap(job["in"])
        if job["op"] == "encrypt":
            out = encrypt(sa, pkts)
            res.update({"processed": len(pkts), "ok": len(out), "dropped": {}})
        elif job["op"] == "decrypt":
            out, results = decrypt(sa, pkts)
            res.update(summary(results))
            res["packets"] = results
        else:
            raise BadInput("unknown op %r" % job["op"])
        write_pcap(job["out"], out)
        res["status"] = "ok"
    except Unsupported as e:
        res.update(status="unsupported", error=str(e))
    except BadInput as e:
        res.update(status="bad_input", error=str(e))
    except Exception as e:
        res.update(status="error", error="%s: %s" % (type(e).__name__, e))
    return res


EXIT = {"ok": 0, "bad_input": 2, "error": 2, "unsupported": 3}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="op", required=True)
    for op in ("encrypt", "decrypt"):
        c = sub.add_parser(op)
        c.add_argument("--sa", required=True)
        c.add_argument("--spi", type=lambda v: int(v, 0))
        c.add_argument("in_pcap")
        c.add_argument("out_pcap")
        if op == "decrypt":
            c.add_argument("--json", action="store_true")
            c.add_argument("--strict", action="store_true")
    b = sub.add_parser("batch")
    b.add_argument("jobs")
    a = ap.parse_args(argv)

    if a.op == "batch":
        with open(a.jobs) as f:
            jobs = json.load(f)
        json.dump([run_job(j) for j in jobs], sys.stdout)
        sys.stdout.write("\n")
        return 0

    res = run_job({"op": a.op, "sa": a.sa, "spi": a.spi, "in": a.in_pcap, "out": a.out_pcap})
    if res["status"] != "ok":
        print("scapy_esp: %s" % res["error"], file=sys.stderr)
        return EXIT[res["status"]]
    if a.op == "decrypt":
        if a.json:
            json.dump(res, sys.stdout)
            sys.stdout.write("\n")
        if a.strict and res["dropped"]:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
