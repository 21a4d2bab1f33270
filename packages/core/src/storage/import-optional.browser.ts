// A bundled page cannot import a package by name at run time: what it uses, it imports itself.
export function importOptional<T>(_specifier: string): Promise<T | undefined> {
  return Promise.resolve(undefined);
}
