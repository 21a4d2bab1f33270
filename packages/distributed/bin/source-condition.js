// Module resolve hook: every workspace package resolves to its TypeScript sources through the
// "@cairn/source" export condition, as `node --conditions=@cairn/source` would do.
export async function resolve(specifier, context, nextResolve) {
  return nextResolve(specifier, { ...context, conditions: [...context.conditions, "@cairn/source"] });
}
