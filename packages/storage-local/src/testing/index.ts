export {
  POWER_LOSS_ROOT,
  type PowerLossCall,
  type PowerLossFaults,
  type PowerLossTurns,
  PowerLossFs,
  powerLossStorage,
} from "./power-loss-fs.js";
