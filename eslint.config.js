import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["**/dist/**", "**/node_modules/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",
      "no-console": "off",
    },
  },
  {
    // Arrays of tensors, steps or stored files spread as arguments overflow the stack from about 125k items.
    files: ["packages/*/src/**/*.ts"],
    ignores: ["**/*.test.ts", "packages/bench/**"],
    rules: {
      "no-restricted-syntax": [
        "error",
        {
          selector: "CallExpression[callee.property.name=/^(push|unshift|splice)$/] > SpreadElement",
          message: "push(...items) overflows the stack from about 125k items: push them in a loop",
        },
        {
          selector:
            "CallExpression[callee.object.name=/^(Math|String)$/][callee.property.name=/^(max|min|fromCharCode)$/] > SpreadElement",
          message: "Math.max(...items) overflows the stack from about 125k items: reduce, or take a bounded piece",
        },
      ],
    },
  },
);
