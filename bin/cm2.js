#!/usr/bin/env node
// Entry point of the `cm2` command: registers tsx so the TypeScript sources run as they are.
'use strict';
require('tsx/cjs');
require('../src/cli/main.ts');
