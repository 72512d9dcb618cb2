// Errors of the Jinja interpreter.
//
// Builtins (filters, methods, value operations) throw TemplateError with what went wrong; the
// interpreter catches it at the statement or expression being evaluated and adds the template's
// name and line, then rethrows it as a ferry::Error ("[jinja] NAME:LINE: what").
#pragma once

#include <stdexcept>
#include <string>

namespace ferry::jinja {

class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace ferry::jinja
