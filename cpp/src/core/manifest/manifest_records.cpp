// The manifest's record of what the package holds and how it was built: its files' digests,
// the weights digest, the custom operators it calls and the patches and numerics its build
// applied, each refused with the field at fault.
#include <algorithm>
#include <cctype>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "core/manifest/manifest_schema.h"
#include "core/package/digest.h"

namespace tdaot::detail {
namespace {

// An identifier as the dispatcher's names use them: [A-Za-z_][A-Za-z0-9_]*.
bool is_identifier(std::string_view text) {
  if (text.empty() || std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  for (const char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// "ns::name" or "ns::name.overload", each part an identifier.
bool is_operator_name(std::string_view name) {
  const size_t colons = name.find("::");
  if (colons == std::string_view::npos || !is_identifier(name.substr(0, colons))) return false;
  const std::string_view rest = name.substr(colons + 2);
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return is_identifier(rest);
  return is_identifier(rest.substr(0, dot)) && is_identifier(rest.substr(dot + 1));
}

// A file name as package.cpp finds it in the archive (without the top folder): relative, '/'
// separated, no empty, "." or ".." part. Package reading refuses such entries anyway; a manifest
// naming one can only be a forgery or a writer's bug.
bool is_relative_file_name(std::string_view name) {
  if (name.empty() || name.find('\\') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return false;
  }
  size_t start = 0;
  while (true) {
    const size_t slash = name.find('/', start);
    const std::string_view part = name.substr(start, slash - start);  // npos: to the end
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

}  // namespace

// The optional "custom_ops" list: qualified operator names ("ns::name[.overload]"), each once.
// The namespace is required, since the runtime looks each one up in the dispatcher by that name.
std::vector<std::string> parse_custom_ops(const Parser& p, const json& root) {
  auto it = root.find("custom_ops");
  if (it == root.end() || it->is_null()) return {};
  const json& list = p.array(*it, "custom_ops");
  std::vector<std::string> ops;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = Parser::index("custom_ops", i);
    std::string name = p.string(list[i], field);
    if (!is_operator_name(name)) {
      p.fail(field, "'" + name +
                        "' is not a qualified operator name (namespace::name), with an optional "
                        ".overload; each part an identifier");
    }
    if (!seen.insert(name).second) p.fail(field, "'" + name + "' is listed twice");
    ops.push_back(std::move(name));
  }
  return ops;
}

// The optional "patches" or "numerics" list (`field`): distinct names of [A-Za-z0-9_]+; nullopt
// when absent or null (a package built before tdaot recorded them).
std::optional<std::vector<std::string>> parse_recorded_names(const Parser& p, const json& root,
                                                             const char* field) {
  auto it = root.find(field);
  if (it == root.end() || it->is_null()) return std::nullopt;
  const json& list = p.array(*it, field);
  std::vector<std::string> names;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = Parser::index(field, i);
    std::string name = p.text(list[i], where);
    const auto is_name_char = [](unsigned char c) { return std::isalnum(c) || c == '_'; };
    if (!std::all_of(name.begin(), name.end(), is_name_char)) {
      p.fail(where, "'" + name + "' is not a name of letters, digits and underscores");
    }
    if (!seen.insert(name).second) p.fail(where, "'" + name + "' is listed twice");
    names.push_back(std::move(name));
  }
  return names;
}

// "files": archive file name -> sha256 hex digest. Required and non-empty in a sealed manifest,
// absent in an unsealed one.
std::map<std::string, std::string> parse_files(const Parser& p, const json& root,
                                               Sealing sealing) {
  if (sealing == Sealing::unsealed) {
    if (root.contains("files")) {
      p.fail("files", "present in an unsealed manifest; the digests are added when the package "
                      "is sealed");
    }
    return {};
  }
  const json& files = p.object(p.member(root, "", "files"), "files");
  if (files.empty()) p.fail("files", "empty; a package lists the digest of every file");
  std::map<std::string, std::string> digests;
  for (const auto& [name, digest] : files.items()) {
    const std::string field = "files['" + name + "']";
    if (name.empty()) p.fail(field, "empty file name");
    if (!is_relative_file_name(name)) {
      p.fail(field, "'" + name + "' is not a relative file name inside the package (no leading "
                                 "'/', '\\', empty, '.' or '..' part)");
    }
    if (tdaot::digest_exempt(name)) {
      p.fail(field, "'" + name + "' is an AOTInductor metadata JSON, a zip bookkeeping "
                                 "record or the signature entry, which is never digested");
    }
    std::string hex = p.string(digest, field);
    if (!detail::is_sha256_hex(hex) || detail::lowercase(hex) != hex) {
      p.fail(field, "'" + hex + "' is not a sha256 digest (64 lowercase hex digits)");
    }
    digests.emplace(name, std::move(hex));
  }
  return digests;
}

// The optional "weights_sha256": 64 lowercase hex digits; empty when absent or null.
std::string parse_weights_sha256(const Parser& p, const json& root) {
  const auto it = root.find("weights_sha256");
  if (it == root.end() || it->is_null()) return {};
  std::string hex = p.string(*it, "weights_sha256");
  if (!detail::is_sha256_hex(hex) || detail::lowercase(hex) != hex) {
    p.fail("weights_sha256", "'" + hex + "' is not a sha256 digest (64 lowercase hex digits)");
  }
  return hex;
}

}  // namespace tdaot::detail
