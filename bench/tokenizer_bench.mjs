// The Node side of bench/tokenizer_bench.sh.
//   node bench/tokenizer_bench.mjs corpus OUT.jsonl MB   writes ~MB megabytes of mixed documents, one
//                                                        JSON string a line (deterministic)
//   node bench/tokenizer_bench.mjs oracle TOKENIZER_DIR CORPUS.jsonl
//        times Hugging Face tokenizers' encodeBatch over the corpus (best of 3 after a warm-up) and
//        prints one JSON line: {"mb_per_s", "tokens", "checksum"} (checksum: FNV-1a of all ids).
import { createRequire } from 'node:module';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ('the of and to in is was for that with as on by at from it an be this which or are have not has ' +
  'model training memory layer gradient optimizer token sequence batch learning rate weight precision GPU CPU ' +
  'transformer attention embedding fine-tuning dataset evaluation loss perplexity checkpoint throughput latency ' +
  'however therefore although because while during after before between through without within').split(' ');
const SNIPPETS = [
  'def step(model, batch):\n    loss = model(batch).loss\n    loss.backward()\n    return loss.item()\n',
  'for (int i = 0; i < n; ++i) {\n  sum += a[i] * b[i];\n}\n',
  '{"id": 12345, "text": "hello", "labels": [-100, 42, 7], "score": 0.875}',
  '大语言模型在训练时需要大量的显存和计算资源。',
  'こんにちは、今日はいい天気ですね。',
  'Привет, как дела? Всё хорошо.',
  'مرحبا بكم في عالم الذكاء الاصطناعي',
  'यह एक परीक्षण वाक्य है।',
  '🚀🔥 emoji 👨‍👩‍👧 ✅',
  'https://example.com/path/to/page?query=1&lang=en#section-2',
  '  indented   text\twith\ttabs   and    spaces  \n\n',
];

function corpus(out, megabytes) {
  const r = rng(12345);
  const target = megabytes * 1e6;
  const lines = [];
  let bytes = 0;
  while (bytes < target) {
    let doc = '';
    const len = 500 + Math.floor(r() * 3500);
    while (doc.length < len) {
      if (r() < 0.12) {
        doc += SNIPPETS[Math.floor(r() * SNIPPETS.length)];
      } else {
        let sentence = '';
        const n = 5 + Math.floor(r() * 20);
        for (let k = 0; k < n; ++k) {
          let w = WORDS[Math.floor(r() * WORDS.length)];
          if (k === 0) w = w[0].toUpperCase() + w.slice(1);
          if (r() < 0.05) w = String(Math.floor(r() * 100000));
          sentence += (k ? ' ' : '') + w;
        }
        doc += sentence + (r() < 0.2 ? '.\n' : '. ');
      }
    }
    bytes += Buffer.byteLength(doc);
    lines.push(JSON.stringify(doc));
  }
  writeFileSync(out, lines.join('\n') + '\n');
  console.error(`corpus: ${lines.length} documents, ${(bytes / 1e6).toFixed(2)} MB`);
}

async function oracle(tokenizerDir, corpusPath) {
  const require = createRequire(join(root, 'tests/fixtures/tokenizers/package.json'));
  const { Tokenizer } = require('@anush008/tokenizers');
  const docs = readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
  const bytes = docs.reduce((s, d) => s + Buffer.byteLength(d), 0);
  const tok = Tokenizer.fromFile(join(tokenizerDir, 'tokenizer.json'));
  let encodings = await tok.encodeBatch(docs, { addSpecialTokens: false });  // warm-up
  let best = Infinity;
  for (let k = 0; k < 3; ++k) {
    const t0 = process.hrtime.bigint();
    encodings = await tok.encodeBatch(docs, { addSpecialTokens: false });
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  let h = 0x811c9dc5, tokens = 0;
  for (const e of encodings) {
    for (const id of e.getIds()) {
      h = Math.imul(h ^ id, 16777619) >>> 0;
      ++tokens;
    }
  }
  console.log(JSON.stringify({ mb_per_s: bytes / 1e6 / best, seconds: best, tokens, checksum: h }));
}

const [mode, a, b] = process.argv.slice(2);
if (mode === 'corpus') corpus(a, Number(b ?? 10));
else if (mode === 'oracle') await oracle(a, b);
else {
  console.error('usage: tokenizer_bench.mjs corpus OUT.jsonl MB | oracle TOKENIZER_DIR CORPUS.jsonl');
  process.exit(2);
}
