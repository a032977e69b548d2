#!/usr/bin/env python3
"""Rewrites a controller's kubebuilder webhook configurations so kube-apiserver calls the
controller on loopback.

Usage: webhooks-to-loopback.py MANIFESTS BASE_URL CA_FILE NAME_PREFIX [KEEP]

Reads MANIFESTS (the module's config/components/webhook/manifests.yaml), applies the JSON
"replace" patches that the module's kustomization lists for each configuration (they add the
pod webhooks' object selectors), points every webhook's clientConfig at BASE_URL + its path with
CA_FILE as caBundle, prefixes each configuration name with NAME_PREFIX, and prints the result as
JSON documents (one per line) on standard output. KEEP, a comma-separated list of webhook names,
drops every other webhook (a controller serving only some integrations should not sit in the
path of every pod or Job the apiserver admits).

With EXEMPT_LABEL set in the environment, a webhook without an object selector skips objects
carrying that label: a test can then create an object as on a cluster without that controller.
"""

import base64
import json
import os
import sys

import yaml


def apply_replace_patches(doc, patches):
    for patch in patches:
        if patch.get("op") != "replace":
            raise SystemExit(f"unsupported patch op {patch.get('op')!r}")
        parts = [p for p in patch["path"].split("/") if p]
        target = doc
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        last = parts[-1]
        if isinstance(target, list):
            target[int(last)] = patch["value"]
        else:
            target[last] = patch["value"]


def kustomize_patches(manifests_path):
    """Maps (kind, name) to the JSON patches the kustomization beside MANIFESTS lists."""
    folder = os.path.dirname(manifests_path)
    kustomization = os.path.join(folder, "kustomization.yaml")
    if not os.path.exists(kustomization):
        return {}
    with open(kustomization) as f:
        config = yaml.safe_load(f) or {}
    found = {}
    for entry in config.get("patches", []):
        if "path" not in entry:
            continue  # inline strategic-merge patches (namespace selectors) are not needed here
        target = entry.get("target", {})
        with open(os.path.join(folder, entry["path"])) as f:
            patch = yaml.safe_load(f)
        if isinstance(patch, list):
            found[(target.get("kind"), target.get("name"))] = patch
    return found


def main():
    if len(sys.argv) not in (5, 6):
        raise SystemExit(__doc__)
    manifests, base_url, ca_file, prefix = sys.argv[1:5]
    keep = set(sys.argv[5].split(",")) if len(sys.argv) == 6 else None
    with open(ca_file, "rb") as f:
        ca_bundle = base64.b64encode(f.read()).decode()
    patches = kustomize_patches(manifests)
    with open(manifests) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        apply_replace_patches(doc, patches.get((kind, name), []))
        doc["metadata"]["name"] = prefix + name
        if keep is not None:
            doc["webhooks"] = [h for h in doc.get("webhooks", []) if h["name"] in keep]
            if not doc["webhooks"]:
                continue
        for hook in doc.get("webhooks", []):
            path = hook["clientConfig"]["service"].get("path", "/")
            hook["clientConfig"] = {"url": base_url.rstrip("/") + path, "caBundle": ca_bundle}
            exempt = os.environ.get("EXEMPT_LABEL")
            if exempt and "objectSelector" not in hook:
                hook["objectSelector"] = {
                    "matchExpressions": [{"key": exempt, "operator": "DoesNotExist"}]
                }
        print(json.dumps(doc))


if __name__ == "__main__":
    main()
