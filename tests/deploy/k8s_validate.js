// SPDX-License-Identifier: Apache-2.0
// Validates Kubernetes objects (a JSON array on stdin) against the schemas
// of npm's kubernetes-models (tests/deploy/k8s-schemas, pinned by its
// lockfile): the same OpenAPI definitions the API server uses, so types,
// enums and required fields are checked. CRDs (monitoring.coreos.com) have
// no schema there and are skipped here; check_kubernetes.py checks them.
// With --no-crds (the base, which must install on a plain cluster) a CRD
// object is an error. Usage: node k8s_validate.js [--no-crds] < objects.json
"use strict";
const path = require("path");
const models = path.join(__dirname, "k8s-schemas", "node_modules", "kubernetes-models");

const noCrds = process.argv.includes("--no-crds");
const objects = JSON.parse(require("fs").readFileSync(0, "utf8"));
let failures = 0;
let validated = 0;
for (const obj of objects) {
  const [group, version] = obj.apiVersion.includes("/") ? obj.apiVersion.split("/") : [null, obj.apiVersion];
  const name = `${obj.kind}/${obj.metadata && obj.metadata.name}`;
  if (group && group.endsWith("monitoring.coreos.com")) {
    if (noCrds) {
      console.error(`k8s_validate: ${name}: ${obj.apiVersion} is a CRD, and this set must need none`);
      failures++;
    }
    continue;
  }
  let Model;
  try {
    Model = require(path.join(models, ...(group ? [group, version] : [version]), obj.kind))[obj.kind];
  } catch (e) {
    console.error(`k8s_validate: ${name}: no schema for ${obj.apiVersion} ${obj.kind}`);
    failures++;
    continue;
  }
  try {
    new Model(obj).validate();
    validated++;
    console.log(`k8s_validate: ${name} (${obj.apiVersion}) valid`);
  } catch (e) {
    console.error(`k8s_validate: ${name}: ${e.message}`);
    failures++;
  }
}
if (validated === 0) {
  console.error("k8s_validate: nothing validated");
  failures++;
}
process.exit(failures ? 1 : 0);
