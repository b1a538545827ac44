// make check: every KEDA and Prometheus Operator resource in the given YAML files (the rendered
// kustomize base and overlays) against the schemas of its custom resource definition, as compiled
// into the validators of the npm packages @kubernetes-models/keda and
// @kubernetes-models/prometheus-operator (pinned by package-lock.json; THIRD_PARTY.md). They check
// types, required fields and enumerations; like the API server, they let unknown fields through.
//
// Prints one line per resource checked and the kinds it does not know (those are the job of
// kubernetes-validate); exits 1 when a resource is invalid or when no file held any resource.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject";
import { TriggerAuthentication } from "@kubernetes-models/keda/keda.sh/v1alpha1/TriggerAuthentication";
import { ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor";

const MODELS = new Map([
  ["keda.sh/v1alpha1 ScaledObject", ScaledObject],
  ["keda.sh/v1alpha1 TriggerAuthentication", TriggerAuthentication],
  ["monitoring.coreos.com/v1 ServiceMonitor", ServiceMonitor],
]);

let failed = 0;
let checked = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    if (doc.errors.length > 0) {
      console.log(`${file}: not YAML: ${doc.errors[0].message}`);
      failed++;
      continue;
    }
    const resource = doc.toJS();
    if (resource === null) continue;
    const type = `${resource.apiVersion} ${resource.kind}`;
    const Model = MODELS.get(type);
    const name = `${resource.kind}/${resource.metadata?.name}`;
    if (Model === undefined) continue;
    checked++;
    try {
      new Model(resource).validate();
      console.log(`${file}: ${name} (${resource.apiVersion}) valid`);
    } catch (error) {
      console.log(`${file}: ${name} (${resource.apiVersion}) INVALID: ${error.message}`);
      failed++;
    }
  }
}
if (checked === 0) {
  console.log("no KEDA or Prometheus Operator resource found");
  process.exit(1);
}
process.exit(failed > 0 ? 1 : 0);
