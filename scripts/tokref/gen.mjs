// Writes the expected token ids of the tokenizer tests, once, with the
// reference implementation (@huggingface/tokenizers, pure JS):
//
//   cd scripts/tokref && npm install --no-save @huggingface/tokenizers@0.2.0
//   go run ./scripts/tokref/writetok bert /tmp/tok   # the generated tokenizer.json
//   node scripts/tokref/gen.mjs /tmp/tok/tokenizer.json > runner/model/tokenizer/testdata/bert_ids.json
//   go run ./scripts/tokref/writetok bpe /tmp/tokbpe
//   node scripts/tokref/gen.mjs /tmp/tokbpe/tokenizer.json > runner/model/tokenizer/testdata/bpe_ids.json
//
// Tests read the JSON and need neither node nor the network.
import { Tokenizer } from "@huggingface/tokenizers";
import { createHash } from "crypto";
import fs from "fs";

const raw = fs.readFileSync(process.argv[2]);
const tok = new Tokenizer(JSON.parse(raw), {});
const corpus = [
  "The quick brown fox jumps over the lazy dog.",
  "Running shoes, blue & white (size 42)!",
  "Café naïve résumé — Hôtel",
  "ÀÉÎÕÜ ñ ç ß ø å",
  "東京の本は中文語 mixed 日本 text",
  "emoji 😀 👍🏽 ☕ coffee",
  "wireless headset usb-c charger 2m cable",
  "",
  "   ",
  "tab\there\nnewline\r\nwindows",
  "zero\u200bwidth and\u00a0nbsp and control\u0007bell",
  "supercalifragilisticexpialidocious",
  "a".repeat(101) + " b " + "c".repeat(100),
  "iPhone cases: the best 5 phone cases for 2026?!",
  "don't stop 'quoted' \"double\" a/b c@d #tag 100% $5",
  "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
  "Ελληνικά кириллица عربى עברית हिन्दी",
  "[CLS] literal [SEP] tokens [MASK]",
  "x[SEP]y [UNK]",
  "the red cat ".repeat(300),
  "Ünïcödé ÇÃFÉ",
  "“curly” ‘quotes’ … ¿qué? ¡sí!",
  "it's they're we'll I'd you've she's I'm DON'T",
  "  leading and trailing spaces  ",
  "multiple   spaces\n\nand\tnewlines 123 4567 x2",
  "<s>special</s> tokens <pad> inside",
];
const cases = corpus.map((text) => ({ text, ids: tok.encode(text).ids }));
const sha256 = createHash("sha256").update(raw).digest("hex");
// One case per line keeps the fixture small and its diffs readable.
const head = JSON.stringify({ reference: "@huggingface/tokenizers 0.2.0", tokenizer_sha256: sha256 }).slice(0, -1);
process.stdout.write(head + ',"cases":[\n' + cases.map((c) => JSON.stringify(c)).join(",\n") + "\n]}\n");
