// image: filled in by its issue.
import type { Extension } from '../types.ts';

export const image: Extension = {};
