#!/usr/bin/env python3
"""Writes ids.json: the token ids llama2.c's encode() gives for the texts of
the tokenizer's tests, with the stories260k tokenizer (tok512.bin).

This is a plain port of llama2.c's run.c encode() (MIT, Andrej Karpathy),
kept as close to the C as Python allows and independent of the Go code it
checks: the vocabulary is sorted and searched with bisect as str_lookup's
bsearch does, and the merge loop rescans every pair after each merge, keeping
the first pair with a strictly higher score.

Run from this directory: python3 llama2c_encode.py > ids.json
"""

import bisect
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "..", "..", "stories260k", "tok512.bin")

TEXTS = [
    "",
    "a",
    " ",
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily.",
    "Hello, world! How are you?",
    "  two leading spaces and  two  inner",
    "tabs\tand\nnew\nlines\r\n",
    "The END. the end... THE end!!!",
    "1234567890 + 3.14159 = ?",
    "<0x41> is not a byte token when written out",
    "café crème brûlée",
    "Ñandú, naïve, Zoë, façade, résumé, jalapeño",
    "àéîõü ÀÉÎÕÜ ßø",
    "东京是日本的首都。",
    "한국어 텍스트",
    "日本語のテキスト",
    "😀",
    "I 😀 the 🇫🇷 flag 👍🏽 and 👨\u200d👩\u200d👧",
    "mixed: Lily said “hi” — and ran… €5 ™",
    "Spot saw a big red ball in the park. He wanted to play with it, but it was stuck in a tree.",
]


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (max_token_length,) = struct.unpack_from("<i", data, 0)
    off = 4
    vocab, scores = [], []
    while off < len(data):
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        vocab.append(data[off:off + n])
        scores.append(score)
        off += n
    return max_token_length, vocab, scores


class Tokenizer:
    def __init__(self, path):
        self.max_token_length, self.vocab, self.scores = load(path)
        # sorted_vocab: (piece, id) sorted by piece, as qsort with strcmp.
        self.sorted_vocab = sorted((p, i) for i, p in enumerate(self.vocab))
        self.sorted_keys = [p for p, _ in self.sorted_vocab]

    def str_lookup(self, s):
        i = bisect.bisect_left(self.sorted_keys, s)
        if i < len(self.sorted_keys) and self.sorted_keys[i] == s:
            return self.sorted_vocab[i][1]
        return -1

    def encode(self, text, bos=True, eos=False):
        text = text.encode("utf-8")
        tokens = []
        if bos:
            tokens.append(1)
        if len(text) > 0:
            tokens.append(self.str_lookup(b" "))
        str_buffer = b""
        for i, c in enumerate(text):
            if (c & 0xC0) != 0x80:
                str_buffer = b""
            str_buffer += bytes([c])
            nxt = text[i + 1] if i + 1 < len(text) else 0
            if (nxt & 0xC0) == 0x80 and len(str_buffer) < 4:
                continue
            tid = self.str_lookup(str_buffer)
            if tid != -1:
                tokens.append(tid)
            else:
                for b in str_buffer:
                    tokens.append(b + 3)
            str_buffer = b""
        while True:
            best_score = -1e10
            best_id = -1
            best_idx = -1
            for i in range(len(tokens) - 1):
                tid = self.str_lookup(self.vocab[tokens[i]] + self.vocab[tokens[i + 1]])
                if tid != -1 and self.scores[tid] > best_score:
                    best_score = self.scores[tid]
                    best_id = tid
                    best_idx = i
            if best_idx == -1:
                break
            tokens[best_idx] = best_id
            del tokens[best_idx + 1]
        if eos:
            tokens.append(2)
        return tokens


def main():
    tok = Tokenizer(TOKENIZER)
    out = [{"text": t, "ids": tok.encode(t)} for t in TEXTS]
    lines = [json.dumps(case, ensure_ascii=False) for case in out]
    sys.stdout.write("[\n" + ",\n".join(lines) + "\n]\n")


if __name__ == "__main__":
    main()
