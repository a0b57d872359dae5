// Writes gpt2_vectors.json: the GPT-2 token ids of each text of gpt2_cases.json, computed by the
// reference JavaScript encoder of the npm package gpt-3-encoder 1.1.4 (OpenAI's encoder.py ported
// to JS). tests/data/test_gpt2_tokenizer.cpp checks that Kiln's tokenizer gives the same ids.
//
// Usage: node gen_gpt2_vectors.js PACKAGE_DIR   (PACKAGE_DIR: the unpacked npm tarball, e.g.
//   npm pack gpt-3-encoder@1.1.4 && tar xzf gpt-3-encoder-1.1.4.tgz && node gen_gpt2_vectors.js package)
//
// The package reads "<|endoftext|>" as plain text (7 tokens), as encoder.py and Kiln's encode()
// do; the special token is Kiln's encode_with_special(), tested separately.
// Its regex differs from encoder.py's (Python `regex`) in what \s is: JS counts U+FEFF and not
// U+0085. Kiln follows encoder.py (Unicode White_Space), so the cases avoid those two characters
// (gen_gpt2_vectors_check.py compares the vectors with encoder.py's logic under Python `regex`).
const fs = require('fs');
const path = require('path');

const pkg = path.resolve(process.argv[2] || 'package');
const { encode, decode } = require(path.join(pkg, 'Encoder.js'));
const cases = JSON.parse(fs.readFileSync(path.join(__dirname, 'gpt2_cases.json'), 'utf-8'));
const out = cases.map(text => {
  if (/[\u0085\ufeff]/.test(text)) throw new Error('case contains U+0085 or U+FEFF: ' + JSON.stringify(text));
  const ids = encode(text);
  if (decode(ids) !== text) throw new Error('the reference does not round-trip ' + JSON.stringify(text));
  return { text, ids };
});
const lines = out.map(c => JSON.stringify(c));
fs.writeFileSync(path.join(__dirname, 'gpt2_vectors.json'), '[\n' + lines.join(',\n') + '\n]\n');
console.log(`gen_gpt2_vectors: ${out.length} cases, ${out.reduce((n, c) => n + c.ids.length, 0)} tokens`);
