#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/.

Medium seeds come from a real image that `ftld format` makes (header, superblock page, the
first checkpoint page, their OOB records); frame-table seeds are written out (a fresh bank and
one after copybacks); the NBD seed is a client's byte stream: fixed
newstyle handshake with NBD_OPT_GO, then write, read, flush, trim, write-zeroes and disconnect.

Usage: fuzz/make_seeds.py FTLD   (the ftld binary; run from anywhere)
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def align(x):
    return (x + 4095) // 4096 * 4096


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def medium_seeds(ftld):
    with tempfile.TemporaryDirectory() as tmp:
        img = os.path.join(tmp, "seed.img")
        for scheme in ["page", "bast"]:
            if os.path.exists(img):
                os.remove(img)
            subprocess.run([ftld, "format", "--preset", "slc-small-004", "--capacity", "4M",
                            "--ftl", scheme, "--image", img], check=True, capture_output=True)
            info = json.loads(subprocess.run([ftld, "info", "--json", img], check=True,
                                             capture_output=True).stdout)
            g = info["nand"]["geometry"]
            banks = g["channels"] * g["banks_per_channel"]
            blocks = banks * g["blocks_per_bank"]
            pages = blocks * g["pages_per_block"]
            data_off = 4096 + align(blocks * 16) + align(pages * 4)
            oob_off = data_off + align(pages * g["page_size"])
            raw = open(img, "rb").read()

            def page(i):
                return raw[data_off + i * g["page_size"]:data_off + (i + 1) * g["page_size"]]

            def oob(i):
                return raw[oob_off + i * g["oob_size"]:oob_off + (i + 1) * g["oob_size"]]

            put("image_header", f"{scheme}-header", raw[:4096])
            put("superblock", f"{scheme}-superblock", page(0))
            put("oob", f"{scheme}-superblock-oob", oob(0))
            # The checkpoint areas follow the superblock block in bank 0.
            ck = g["pages_per_block"]
            put("checkpoint", f"{scheme}-checkpoint", page(ck))
            put("oob", f"{scheme}-checkpoint-oob", oob(ck))


def nbd_seed():
    out = bytearray()
    out += struct.pack(">I", 3)  # client flags: fixed newstyle, no zeroes
    name = b""
    go = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
    out += b"IHAVEOPT" + struct.pack(">II", 7, len(go)) + go

    def req(kind, cookie, offset, length, payload=b"", flags=0):
        return struct.pack(">IHHQQI", 0x25609513, flags, kind, cookie, offset, length) + payload

    out += req(1, 1, 4096, 4096, bytes(range(256)) * 16)  # write
    out += req(0, 2, 4096, 4096)  # read
    out += req(3, 3, 0, 0)  # flush
    out += req(4, 4, 8192, 8192)  # trim
    out += req(6, 5, 0, 4096)  # write zeroes
    out += req(1, 6, 0, 512, b"\xaa" * 512, flags=1)  # FUA write
    out += req(2, 7, 0, 0)  # disconnect
    put("nbd_connection", "go-write-read-flush-trim-zeroes", bytes(out))
    # Old-style export name option instead of GO.
    legacy = struct.pack(">I", 1) + b"IHAVEOPT" + struct.pack(">II", 1, 0)
    put("nbd_connection", "export-name", legacy + req(0, 1, 0, 4096) + req(2, 2, 0, 0))


def frame_table_seeds():
    # Two bytes of page count - 1, then 4-byte little-endian entries (0 = own frame, else
    # frame + 1): a fresh bank, and one after copybacks where pages share frames.
    pages = 64
    put("frame_table", "fresh", struct.pack("<H", pages - 1) + bytes(4 * pages))
    entries = [0] * pages
    for i in range(32, 48):
        entries[i] = i - 32 + 1  # pages 32..47 copied back from pages 0..15
    entries[50] = 1  # a third page sharing frame 0
    put("frame_table", "copybacks",
        struct.pack("<H", pages - 1) + b"".join(struct.pack("<I", e) for e in entries))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    medium_seeds(sys.argv[1])
    nbd_seed()
    frame_table_seeds()
