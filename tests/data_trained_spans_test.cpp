// A document printed with its trained tokens marked.
#include <gtest/gtest.h>

#include "data/trained_spans.h"
#include "data_test_tokenizer.h"

namespace ferry {
namespace {

TEST(TrainedSpans, TrainedRunsAreBracketed) {
  const Tokenizer t = Tokenizer::from_json(test::tiny_tokenizer_json(), "{}");
  const std::vector<int32_t> prompt = t.encode("Q: hi\n", false);
  const std::vector<int32_t> answer = t.encode("hello", false);
  Document doc;
  doc.input_ids = prompt;
  doc.input_ids.insert(doc.input_ids.end(), answer.begin(), answer.end());
  doc.labels.assign(prompt.size(), kIgnoreIndex);
  doc.labels.insert(doc.labels.end(), answer.begin(), answer.end());
  EXPECT_EQ(mark_trained_spans(doc, t), "Q: hi\n\u27e6hello\u27e7");
  doc.labels = doc.input_ids;
  EXPECT_EQ(mark_trained_spans(doc, t), "\u27e6Q: hi\nhello\u27e7");
  EXPECT_EQ(mark_trained_spans(Document{}, t), "");
}

}  // namespace
}  // namespace ferry
