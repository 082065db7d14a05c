// Debian's Chromium (/usr/bin/chromium) driven by playwright-core, as every browser test launches it:
// headless, no sandbox (tests run as root), and no background network traffic, which this machine's
// closed network would refuse over and over.
import { chromium } from 'playwright-core';

export const CHROMIUM_ARGS = Object.freeze([
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
]);

export function launchChromium() {
  return chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: [...CHROMIUM_ARGS] });
}
