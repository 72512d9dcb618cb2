#include "data/trained_spans.h"

#include <vector>

namespace ferry {

std::string mark_trained_spans(const Document& document, const Tokenizer& tokenizer) {
  std::string out;
  std::vector<int32_t> run;
  bool trained = false;
  // Runs are decoded whole, so that a character spread over several byte tokens comes out whole.
  auto flush = [&] {
    if (run.empty()) return;
    if (trained) out += kTrainedOpen;
    out += tokenizer.decode(run);
    if (trained) out += kTrainedClose;
    run.clear();
  };
  for (size_t t = 0; t < document.input_ids.size(); ++t) {
    const bool is_trained = document.labels[t] != kIgnoreIndex;
    if (is_trained != trained) flush();
    trained = is_trained;
    run.push_back(document.input_ids[t]);
  }
  flush();
  return out;
}

}  // namespace ferry
