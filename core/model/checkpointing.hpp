// What the forward pass keeps for the backward pass (activation checkpointing).
#pragma once

namespace lct {

enum class Checkpointing {
  None,       // every activation of every layer
  Attention,  // everything but the attention output, recomputed (flash forward) in backward
  Full,       // only each layer's input; the whole layer is recomputed in backward
};

inline const char* to_string(Checkpointing c) {
  return c == Checkpointing::None ? "none" : c == Checkpointing::Attention ? "attention" : "full";
}

}  // namespace lct
