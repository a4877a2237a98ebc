#!/usr/bin/env node
// k8s_validate.js FILE - checks Kubernetes objects against the API schemas, offline.
//
// FILE holds a JSON array of objects (tests/integration/test_deploy_kubernetes.py writes it from
// `kubectl kustomize deploy/kubernetes`). Each object is checked twice, with the schemas of the
// npm package kubernetes-models (generated from the Kubernetes OpenAPI specification):
//   1. its validate(): types, required fields, enums, formats;
//   2. unknown fields, which validate() lets through (the schemas allow additional properties):
//      the object is walked along the package's own type declarations (*.d.ts), and every
//      field that its type does not declare is an error. A field the API server would drop
//      silently (a typo: `imagePullPolcy`) is a setting that never takes effect.
// Prints one line per problem, "Kind/name: where: what", and exits 1 if there was any, 2 if
// the file cannot be read; 0 and "ok N objects" otherwise.
'use strict';
const fs = require('fs');
const path = require('path');

const MODELS = path.dirname(require.resolve('kubernetes-models/package.json'));
const NODE_MODULES = path.dirname(MODELS);
const PROP = /^    "([^"]+)"\??: (.*)$/;
const dtsCache = new Map();

// The declared fields of the interface in one .d.ts file: {fields: Map(name -> type text),
// imports: Map(alias -> .d.ts path)}; fields is null when the file declares no interface (a
// type alias such as IntOrString: a leaf).
function loadDts(file) {
    if (dtsCache.has(file))
        return dtsCache.get(file);
    const text = fs.readFileSync(file, 'utf8');
    const imports = new Map();
    for (const m of text.matchAll(/^import \{ (\w+) \} from "([^"]+)";$/gm)) {
        const spec = m[2].startsWith('.') ? path.resolve(path.dirname(file), m[2])
                                           : path.join(NODE_MODULES, m[2]);
        imports.set(m[1], spec.replace(/\.js$/, '') + '.d.ts');
    }
    let fields = null;
    const lines = text.split('\n');
    const start = lines.findIndex((l) => /^export interface \w+/.test(l));
    if (start >= 0) {
        fields = new Map();
        for (let i = start + 1; i < lines.length && lines[i] !== '}'; i++) {
            const m = PROP.exec(lines[i]);
            if (!m)
                continue; // comments
            let type = m[2];
            while (!type.endsWith(';') && i + 1 < lines.length) // a map type over lines
                type += ' ' + lines[++i].trim();
            fields.set(m[1], type.replace(/;$/, '').replace(/\s+/g, ' '));
        }
    }
    const d = { fields, imports };
    dtsCache.set(file, d);
    return d;
}

// Walks value along the type text `type` (as written in the .d.ts of `owner`), pushing the
// path of each undeclared field onto out.
function walkType(value, type, owner, where, out) {
    let m;
    if (value === null || typeof value !== 'object')
        return;
    if ((m = /^Array<(.*)>$/.exec(type))) {
        if (Array.isArray(value))
            value.forEach((v, i) => walkType(v, m[1], owner, `${where}[${i}]`, out));
        return;
    }
    if ((m = /^\{ \[key: string\]: (.*); \}$/.exec(type))) {
        for (const [k, v] of Object.entries(value))
            walkType(v, m[1], owner, `${where}.${k}`, out);
        return;
    }
    const file = owner.imports.get(type);
    if (file)
        walkFile(value, file, where, out);
}

function walkFile(value, file, where, out) {
    const d = loadDts(file);
    if (!d.fields || Array.isArray(value))
        return;
    for (const [k, v] of Object.entries(value)) {
        const type = d.fields.get(k);
        const at = where ? `${where}.${k}` : k;
        if (type === undefined)
            out.push(`${at}: unknown field (${path.basename(file, '.d.ts')} has no '${k}')`);
        else
            walkType(v, type, d, at, out);
    }
}

// "apps/v1" -> "apps/v1", "v1" -> "v1": the package's directory of that group and version.
function modelFile(obj) {
    return path.join(MODELS, obj.apiVersion, `${obj.kind}.d.ts`);
}

async function checkOne(obj) {
    const problems = [];
    if (!obj || typeof obj.apiVersion !== 'string' || typeof obj.kind !== 'string')
        return ['not a Kubernetes object (no apiVersion or kind)'];
    const file = modelFile(obj);
    if (!/^[\w.]+(\/\w+)?$/.test(obj.apiVersion) || !/^\w+$/.test(obj.kind) ||
        !fs.existsSync(file))
        return [`no schema for ${obj.apiVersion} ${obj.kind} in kubernetes-models`];
    const mod = await import(`kubernetes-models/${obj.apiVersion}/${obj.kind}`);
    try {
        new mod[obj.kind](obj).validate();
    } catch (e) {
        problems.push(`schema: ${e.message}`);
    }
    walkFile(obj, file, '', problems);
    return problems;
}

async function main() {
    if (process.argv.length !== 3) {
        process.stderr.write('usage: k8s_validate.js FILE (a JSON array of objects)\n');
        process.exit(2);
    }
    let objs;
    try {
        objs = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
        if (!Array.isArray(objs))
            throw new Error('not a JSON array');
    } catch (e) {
        process.stderr.write(`k8s_validate.js: ${process.argv[2]}: ${e.message}\n`);
        process.exit(2);
    }
    let bad = 0;
    for (const obj of objs) {
        const name = `${obj && obj.kind}/${obj && obj.metadata && obj.metadata.name}`;
        for (const p of await checkOne(obj)) {
            console.log(`${name}: ${p}`);
            bad++;
        }
    }
    if (bad)
        process.exit(1);
    console.log(`ok ${objs.length} objects`);
}

main().catch((e) => {
    process.stderr.write(`k8s_validate.js: ${e.stack}\n`);
    process.exit(2);
});
