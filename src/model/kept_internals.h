// How much of its forward a layer keeps where it skips the forward's recompute in its backward
// (carve_kept_internals, model/decoder_layer.h). The products' outputs (the GEMMs' and the
// attention's) are what the recompute would spend its FLOPs on; the rest are memory-bound passes
// the backward runs again unless they are kept too, each for more memory per kept layer.
#pragma once

namespace ferry {

enum class KeptInternals {
  Products,   // q/k/v, attention output and statistics, x1, gate, up: the norms and the activation run again
  WithNorms,  // and the two norms' outputs and statistics (2H values and two floats a token): the activation
              // runs again
  WithActivation,  // and the SwiGLU activation (F values a token more): nothing runs again
};

inline bool keeps_norm_outputs(KeptInternals k) {
  return k != KeptInternals::Products;
}
inline bool keeps_activation(KeptInternals k) {
  return k == KeptInternals::WithActivation;
}

// How layers keep their internals, in words that follow "internals kept".
inline const char* kept_internals_manner(KeptInternals k) {
  switch (k) {
    case KeptInternals::Products:
      return "alone";
    case KeptInternals::WithNorms:
      return "with the norms' outputs";
    case KeptInternals::WithActivation:
      return "with the norms' outputs and the activation";
  }
  return "?";
}

}  // namespace ferry
