// make check: every KEDA and Prometheus Operator resource in the given YAML files (the rendered
// kustomize base and overlays) against its custom resource definition, two ways, both from the
// npm packages @kubernetes-models/keda and @kubernetes-models/prometheus-operator (pinned by
// package-lock.json; THIRD_PARTY.md):
//   1. their validators, the CRDs' schemas compiled (ajv): types, required fields, enumerations;
//      like the API server, they let unknown fields through, so
//   2. their TypeScript types: each resource becomes an object literal of its type, and `tsc`
//      refuses a field the type does not have (a misspelt `maxReplicaCont`).
// Prints one line per resource checked; exits 1 when one is invalid or no file held any.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject";
import { TriggerAuthentication } from "@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";
import { PrometheusRule } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule";

const KEDA = "@kubernetes-models/keda/keda.sh/v1alpha1";
const PROMETHEUS = "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
// "apiVersion kind" → [validating model, TypeScript interface, module]
const MODELS = new Map([
  ["keda.sh/v1alpha1 ScaledObject", [ScaledObject, "IScaledObject", `${KEDA}/ScaledObject`]],
  ["keda.sh/v1alpha1 TriggerAuthentication",
    [TriggerAuthentication, "ITriggerAuthentication", `${KEDA}/TriggerAuthentication`]],
  ["monitoring.coreos.com/v1 ServiceMonitor", [ServiceMonitor, "IServiceMonitor", `${PROMETHEUS}/ServiceMonitor`]],
  ["monitoring.coreos.com/v1 PrometheusRule", [PrometheusRule, "IPrometheusRule", `${PROMETHEUS}/PrometheusRule`]],
]);

let failed = 0;
const resources = []; // [where, type, resource]
for (const file of process.argv.slice(2)) {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    if (doc.errors.length > 0) {
      console.log(`${file}: not YAML: ${doc.errors[0].message}`);
      failed++;
      continue;
    }
    const resource = doc.toJS();
    const type = `${resource?.apiVersion} ${resource?.kind}`;
    if (resource !== null && MODELS.has(type)) {
      resources.push([`${file}: ${resource.kind}/${resource.metadata?.name} (${resource.apiVersion})`, type, resource]);
    }
  }
}
if (resources.length === 0) {
  console.log("no KEDA or Prometheus Operator resource found");
  process.exit(1);
}

// 1. The compiled schemas.
const invalid = new Set();
for (const [where, type, resource] of resources) {
  const [Model] = MODELS.get(type);
  try {
    new Model(resource).validate();
  } catch (error) {
    console.log(`${where} INVALID: ${error.message}`);
    invalid.add(where);
  }
}

// 2. The types: one object literal per line, so an error's line names its resource.
const here = dirname(fileURLToPath(import.meta.url));
const scratch = mkdtempSync(join(here, ".typecheck-"));
const lines = [...MODELS.values()].map(([, name, module]) => `import type { ${name} } from "${module}";`);
const first = lines.length + 1;
resources.forEach(([, type, resource], i) => {
  lines.push(`export const r${i}: ${MODELS.get(type)[1]} = ${JSON.stringify(resource)};`);
});
const source = join(scratch, "resources.ts");
writeFileSync(source, lines.join("\n") + "\n");
let output = "";
try {
  execFileSync(join(here, "node_modules", ".bin", "tsc"),
    ["--noEmit", "--strict", "--skipLibCheck", "--target", "es2022", "--module", "nodenext",
     "--moduleResolution", "nodenext", source], { encoding: "utf8" });
} catch (error) {
  output = `${error.stdout ?? ""}${error.stderr ?? ""}`;
  if (!output) throw error;
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
for (const line of output.split("\n").filter(Boolean)) {
  const match = line.match(/resources\.ts\((\d+),\d+\): error TS\d+: (.*)$/);
  const index = match ? Number(match[1]) - first : -1;
  const where = resources[index]?.[0] ?? "resources.ts";
  console.log(`${where} INVALID: ${match ? match[2] : line}`);
  invalid.add(where);
}

for (const [where] of resources) {
  if (!invalid.has(where)) console.log(`${where} valid`);
}
process.exit(invalid.size > 0 || failed > 0 ? 1 : 0);
