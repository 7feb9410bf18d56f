// Parses an AsyncAPI document with the official parser and prints its
// diagnostics; exits 1 on any error-severity diagnostic.
const { Parser } = require('@asyncapi/parser');
const fs = require('fs');
(async () => {
  const text = fs.readFileSync(process.argv[2], 'utf8');
  const parser = new Parser();
  const { document, diagnostics } = await parser.parse(text);
  let errors = 0;
  for (const d of diagnostics) {
    const sev = ['error', 'warning', 'info', 'hint'][d.severity];
    if (d.severity === 0) errors++;
    console.log(`${sev} ${d.code} ${JSON.stringify(d.path)} ${d.message}`);
  }
  if (!document || errors) { console.log('INVALID'); process.exit(1); }
  console.log('VALID channels=' + document.channels().length + ' operations=' + document.operations().length + ' messages=' + document.allMessages().length);
})().catch(e => { console.error(e); process.exit(2); });
