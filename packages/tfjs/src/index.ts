// @cairn/tfjs owns what Cairn knows about tfjs: model+optimizer state dicts, cairnIO and its cairn+ URLs, model files.
// It may import @cairn/core (and its ops), @cairn/storage-local and, as types or lazily, the user's tfjs.
export { getStateDict, setStateDict, primeOptimizer } from "./state-dict.js";
export { type CairnIOOptions, cairnIO } from "./cairn-io.js";
export { MODEL_FILE, WEIGHTS_FILE, tfjsModelEntries, writeTfjsModel } from "./model-files.js";
export { type TfjsModelInfo, WEIGHTS_KEY, USER_KEY } from "./model-layout.js";
export { ROUTER_PREFIX, registerCairnRouters } from "./io-router.js";
export { torchStyleNames } from "./torch-names.js";
