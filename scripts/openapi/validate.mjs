// Validates an OpenAPI description with @apidevtools/swagger-parser (the
// official OpenAPI 3.1 schema plus its own checks, every $ref resolved).
// Usage: node validate.mjs FILE. Exit 0 and "valid" when it is; else the
// validator's message and exit 1.
import SwaggerParser from "@apidevtools/swagger-parser";

const file = process.argv[2];
if (!file) {
  console.error("usage: node validate.mjs openapi.yaml");
  process.exit(2);
}
try {
  const api = await SwaggerParser.validate(file);
  console.log(`valid: ${api.info.title} ${api.openapi}, ${Object.keys(api.paths).length} paths`);
} catch (err) {
  console.error(err.message);
  process.exit(1);
}
