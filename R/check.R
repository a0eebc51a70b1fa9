# The document rules that R applies to a parsed program.json (jit_inspect()): the JSON
# Schema (shared_ir/program.schema.json, applied by a small interpreter of the draft-07
# keywords it uses), the header and versions, the document fields, and the names of
# methods, state, dispatch entries, classes and aliases, driven by the installed tables
# (inst/shared_ir: program.schema.json, ops.json, dtypes.json). These are the rules of
# Python's tracebridge.check.program.check_document_rules(), in the same order; the
# cross-language tests (tests/python/test_check_program.py) feed both the same crafted
# files.
#
# Note: one checker. The execution rules (graphs, SSA, ops and the kinds of their
# arguments, literals, sizes and resource limits) live once, in Python's check_program().
# jit_inspect() runs nothing, so it needs only a document it can show; jit_load() loads
# through Python, which runs every rule before any runtime sees the program.
#
# Note: numbers. jsonlite returns a JSON integer below 2^31 as an R integer, a JSON number
# with a fraction or exponent as a double, and read_program() keeps integers of 2^31 and
# more as tagged text (tag_big_ints()), so "an integer literal" is is.integer() or a tagged
# text, as Python's int is, and 2.0 is a float in both languages.

tb_tables <- local({
  cache <- NULL
  function() {
    if (is.null(cache)) {
      read <- function(file) {
        path <- system.file("shared_ir", file, package = "tracebridge")
        if (!nzchar(path)) {
          # R/check.R sourced from a checkout (the cross-language test): the repository's copy
          path <- file.path(Sys.getenv("TRACEBRIDGE_SHARED_IR", "shared_ir"), file)
        }
        if (!file.exists(path)) stop("tracebridge: inst/shared_ir/", file, " is not installed")
        jsonlite::read_json(path, simplifyVector = FALSE)
      }
      ops <- read("ops.json")
      ops[["reserved"]] <- unlist(ops[["names"]][["reserved_methods"]])
      cache <<- list(ops = ops, dtypes = read("dtypes.json"),
                     schema = read("program.schema.json"))
    }
    cache
  }
})

check_fault <- function(rule, message, fix = NULL) {
  stop(structure(class = c("tracebridge_check_fault", "error", "condition"),
                 list(message = message, rule = rule, fix = fix, call = NULL)))
}

check_message <- function(file, method, index, op, fault) {
  where <- character(0)
  if (!is.null(method)) where <- c(where, sprintf("method '%s'", method))
  if (!is.null(index)) {
    where <- c(where, paste0("node ", index, if (!is.null(op)) sprintf(" (%s)", op) else ""))
  }
  head <- paste0(file, ": ", if (length(where)) paste0(paste(where, collapse = ", "), ": "))
  fix <- fault[["fix"]] %||%
    "the file is corrupt or was edited by hand; save it again from the traced code"
  sprintf("%s%s [rule: %s]; %s", head, conditionMessage(fault), fault[["rule"]], fix)
}

# The names prim.setting reads (shared_ir/SPEC.md, section 6): a reader MUST refuse a name
# it does not know, as Python's check_program() does. jit_inspect() shows each read as a
# guard, so it refuses such a file too, naming the method and node; the names are
# `settings` of ops.json, generated from python/tracebridge/ir/ops.py (SETTINGS), so that
# both readers know the same ones.
check_settings <- function(doc, file) {
  known <- names(tb_tables()[["ops"]][["settings"]])
  for (method in names(doc[["methods"]])) {
    nodes <- doc[["methods"]][[method]][["nodes"]]
    for (i in seq_along(nodes)) {
      node <- nodes[[i]]
      if (!identical(node[["op"]], "prim.setting")) next
      name <- node[["args"]][[1]]
      if (is_str(name) && name %in% known) next
      shown <- if (is_str(name)) sprintf("'%s'", substr(name, 1, 30)) else "a non-name"
      fault <- tryCatch(check_fault("literals", sprintf(
        "prim.setting reads %s, which is not a setting this tracebridge knows", shown),
        "the file was made by a newer tracebridge or edited; upgrade tracebridge to read it"),
        tracebridge_check_fault = function(f) f)
      inspect_abort(check_message(file, method, i - 1L, "prim.setting", fault))
    }
  }
  invisible()
}

# The document rules of shared_ir/SPEC.md; see check_document_rules() in Python.
check_program <- function(doc, file, strict = FALSE) {
  tryCatch({
    check_depth(doc)
    check_header(doc)
    check_schema(doc)
    check_document(doc, strict)
    check_names_and_dispatch(doc)
    check_mode_bound(doc)
    check_specialised(doc)
    check_aliases(doc)
    check_generators(doc)
  }, tracebridge_check_fault = function(fault) {
    inspect_abort(check_message(file, NULL, NULL, NULL, fault))
  })
  invisible()
}

is_obj <- function(x) is.list(x) && !is.null(names(x))
is_arr <- function(x) is.list(x) && is.null(names(x))
is_str <- function(x) is.character(x) && length(x) == 1L && !is_big_int(x)
is_int_lit <- function(x) (is.integer(x) && length(x) == 1L) || is_big_int(x)
is_flag <- function(x) is.logical(x) && length(x) == 1L && !is.na(x)
big_digits <- function(x) substring(x, nchar(big_int_tag) + 1L)
int_value <- function(x) if (is_big_int(x)) as.numeric(big_digits(x)) else as.numeric(x)
id_key <- function(x) if (is_big_int(x)) big_digits(x) else as.character(x)

fits <- function(pattern, text, limit) {
  is_str(text) && !is.na(text) && nchar(text, type = "chars") <= limit &&
    grepl(paste0("^(?:", pattern, ")\\z"), text, perl = TRUE)
}

check_depth <- function(doc) {
  # Level by level, so that the cost is linear in the size of the document.
  limit <- tb_tables()[["ops"]][["limits"]][["depth"]]
  level <- list(doc)
  depth <- 1L
  while (length(level)) {
    if (depth > limit) {
      check_fault("resource limits", sprintf("JSON nested more than %d levels deep", limit))
    }
    lists <- level[vapply(level, is.list, logical(1))]
    level <- do.call(c, unname(lapply(lists, unname)))
    depth <- depth + 1L
  }
}

check_header <- function(doc) {
  if (!is_obj(doc) || !identical(doc[["format"]], "tracebridge")) {
    check_fault("document", "not a tracebridge artifact (format field missing)",
                "open a file written by tracebridge.save or jit_save")
  }
  version <- doc[["format_version"]]
  if (!is_int_lit(version) || int_value(version) < 1) {
    check_fault("document", sprintf("invalid format_version %s", deparse(version)[1]))
  }
  if (int_value(version) > inspect_format_version) {
    check_fault("versions", sprintf(
      "format version %s is newer than this tracebridge reads (up to %d)",
      id_key(version), inspect_format_version), "upgrade tracebridge to load it")
  }
  opset <- doc[["opset_version"]]
  known <- tb_tables()[["ops"]][["opset_version"]]
  if (!is_int_lit(opset) || int_value(opset) < 1) {
    check_fault("document", sprintf("invalid opset_version %s", deparse(opset)[1]))
  }
  if (int_value(opset) > known) {
    check_fault("versions", sprintf(
      "op-set version %s is newer than this tracebridge knows (%d)", id_key(opset), known),
      "upgrade tracebridge to load it")
  }
}

# --- the JSON Schema (shared_ir/program.schema.json), applied ---------------------------

schema_fault <- function(where, what) {
  check_fault("schema", sprintf("program.json does not follow the schema at %s: %s",
                                where, what))
}

check_schema <- function(doc) {
  schema <- tb_tables()[["schema"]]
  fault <- schema_error(doc, schema, character(0), schema)
  if (!is.null(fault)) schema_fault(fault[["where"]], fault[["what"]])
}

# Whether the JSON value `x` (as jsonlite and tag_big_ints() give it) has the JSON Schema
# type `type`. An integer is an integer literal or a whole double, as fastjsonschema reads
# 2.0 in Python.
json_type_is <- function(x, type) {
  switch(type,
    object = is_obj(x),
    array = is_arr(x),
    string = is_str(x),
    integer = is_int_lit(x) || (is.double(x) && length(x) == 1L && is.finite(x) && x %% 1 == 0),
    number = is_int_lit(x) || (is.double(x) && length(x) == 1L),
    boolean = is_flag(x),
    null = is.null(x),
    FALSE
  )
}

# The first place where `x` breaks `s` (a schema of the draft-07 keywords the program
# schema uses: $ref, oneOf, const, enum, type, required, properties, additionalProperties,
# minProperties, items, minLength, minimum, pattern): list(where, what), or NULL.
schema_error <- function(x, s, path, root) {
  here <- function(what) {
    list(where = if (length(path)) paste(path, collapse = "/") else "(top level)", what = what)
  }
  ref <- s[["$ref"]]
  if (!is.null(ref)) s <- root[["definitions"]][[sub("^#/definitions/", "", ref)]]
  if (!is.null(s[["oneOf"]])) {
    fits <- 0L
    for (o in s[["oneOf"]]) fits <- fits + is.null(schema_error(x, o, path, root))
    if (fits != 1L) return(here("must match exactly one of its alternatives"))
  }
  if (!is.null(s[["const"]]) && !identical(x, s[["const"]])) {
    return(here(sprintf("must be %s", s[["const"]])))
  }
  if (!is.null(s[["enum"]]) && !(is.character(x) && length(x) == 1L &&
                                 x %in% unlist(s[["enum"]]))) {
    return(here(sprintf("must be one of [%s]", paste(unlist(s[["enum"]]), collapse = ", "))))
  }
  types <- s[["type"]]
  if (!is.null(types)) {
    ok <- FALSE
    for (type in types) if (json_type_is(x, type)) {
      ok <- TRUE
      break
    }
    if (!ok) return(here(sprintf("must be %s", paste(unlist(types), collapse = " or "))))
  }
  if (is.list(x)) {
    keys <- names(x)
    if (!is.null(keys)) {
      required <- unlist(s[["required"]])
      missing <- required[!required %in% keys]
      if (length(missing)) return(here(sprintf("must contain %s", missing[[1]])))
      if (!is.null(s[["minProperties"]]) && length(x) < s[["minProperties"]]) {
        return(here(sprintf("must have at least %d properties", s[["minProperties"]])))
      }
      props <- s[["properties"]]
      extra <- s[["additionalProperties"]]
      for (i in seq_along(x)) {
        sub_schema <- props[[keys[[i]]]] %||% extra
        if (is.null(sub_schema)) next
        if (isFALSE(sub_schema)) {
          return(here(sprintf("must not contain %s", substr(keys[[i]], 1, 40))))
        }
        fault <- schema_error(x[[i]], sub_schema, c(path, keys[[i]]), root)
        if (!is.null(fault)) return(fault)
      }
    } else if (!is.null(s[["items"]])) {
      for (i in seq_along(x)) {
        fault <- schema_error(x[[i]], s[["items"]], c(path, i - 1L), root)
        if (!is.null(fault)) return(fault)
      }
    }
  }
  # A pattern is searched for, as JSON Schema (and Python's jsonschema) do; the schema's
  # patterns are anchored.
  if (!is.null(s[["pattern"]]) && is_str(x) && !grepl(s[["pattern"]], x, perl = TRUE)) {
    return(here(sprintf("must match %s", s[["pattern"]])))
  }
  if (!is.null(s[["minLength"]]) && is_str(x) && nchar(x, type = "chars") < s[["minLength"]]) {
    return(here(sprintf("must be at least %d characters long", s[["minLength"]])))
  }
  if (!is.null(s[["minimum"]]) && (is_int_lit(x) || is.double(x)) &&
      int_value(x) < s[["minimum"]]) {
    return(here(sprintf("must be bigger than or equal to %s", s[["minimum"]])))
  }
  NULL
}

# --- the rules ----------------------------------------------------------------------------

check_document <- function(doc, strict) {
  for (i in seq_along(doc[["state"]])) {
    name <- names(doc[["state"]])[[i]]
    if (!all(vapply(doc[["state"]][[i]][["shape"]], is_int_lit, logical(1)))) {
      check_fault("document", sprintf("state '%s' has a shape that is not a list of integers",
                                      name))
    }
  }
  t <- doc[["tensors"]]
  if (!is.null(t[["count"]]) && !is_int_lit(t[["count"]])) {
    check_fault("document", "tensors.count must be an integer")
  }
  if (strict && is.null(t[["sha256"]])) {
    check_fault("document", "program.json has no tensors.sha256 checksum",
                "save the program again with tracebridge")
  }
  external <- if ("external" %in% names(t)) t[["external"]] else list()
  if (!is_arr(external) || !all(vapply(external, function(n) {
    is_str(n) && n %in% names(doc[["state"]])
  }, logical(1)))) {
    check_fault("document", "tensors.external must be a list of names of state entries")
  }
  if (anyDuplicated(unlist(external))) {
    check_fault("document", "tensors.external names a state entry twice")
  }
  stored <- length(doc[["state"]]) - length(external)  # external weights are bound at load
  if (!is.null(t[["count"]]) && int_value(t[["count"]]) != stored) {
    check_fault("document", sprintf(
      "tensors.count is %s but the state has %d tensors stored in the file",
      id_key(t[["count"]]), stored))
  }
  limit <- tb_tables()[["ops"]][["limits"]][["methods"]]
  if (length(doc[["methods"]]) > limit) {
    check_fault("resource limits", sprintf("%d methods, more than %d", length(doc[["methods"]]),
                                           limit))
  }
}

check_method_name <- function(name, what) {
  ops <- tb_tables()[["ops"]]
  if (!fits(ops[["names"]][["method"]], name, ops[["limits"]][["name_chars"]])) {
    check_fault("names", sprintf(
      "%s name '%s' is not a name of the form [A-Za-z][A-Za-z0-9_]*", what, substr(name, 1, 40)))
  }
  if (name %in% ops[["reserved"]]) {
    check_fault("names", sprintf(
      "%s name '%s' would replace the loaded module's own attribute '%s'", what, name, name),
      "trace the method under another name")
  }
}

check_path_name <- function(name, what) {
  ops <- tb_tables()[["ops"]]
  if (!fits(ops[["names"]][["path"]], name, ops[["limits"]][["name_chars"]])) {
    check_fault("names", sprintf("%s name '%s' is not a dotted path of [A-Za-z0-9_-] parts",
                                 what, substr(name, 1, 40)))
  }
}

# mode_bound (in meta for format 1) names methods, with a boolean mode.
check_mode_bound <- function(doc) {
  ops <- tb_tables()[["ops"]]
  bound <- doc[["mode_bound"]]
  if (identical(int_value(doc[["format_version"]]), 1)) {
    meta <- doc[["meta"]]
    bound <- meta[["mode_bound"]]
    backend <- meta[["backend"]]
    if (!is.null(backend) && !(is_obj(backend) && is_str(backend[["name"]]))) {
      check_fault("document", "meta.backend of a format-1 file must be an object with a name")
    }
  }
  if (is.null(bound)) return(invisible())
  if (!is_obj(bound)) check_fault("document", "mode_bound must be an object of methods")
  for (i in seq_along(bound)) {
    method <- names(bound)[[i]]
    entry <- bound[[i]]
    if (!method %in% names(doc[["methods"]])) {
      check_fault("dispatch", sprintf(
        "mode_bound names method '%s', which the file does not have", substr(method, 1, 40)))
    }
    if (!is_obj(entry) || !is_flag(entry[["training"]])) {
      check_fault("document", sprintf("mode_bound of '%s' needs a boolean 'training'", method))
    }
    loc <- entry[["loc"]]
    if (!is.null(loc) && !fits(ops[["names"]][["loc"]], loc, ops[["limits"]][["text_chars"]])) {
      check_fault("names", "a mode_bound loc must be 'path:line' without control characters")
    }
    if ("op" %in% names(entry) && !is_str(entry[["op"]])) {
      check_fault("document", sprintf("mode_bound of '%s' has an op that is not a string",
                                      method))
    }
  }
}

# aliases (other name -> state name: tied weights) name state entries and are not ones.
check_aliases <- function(doc) {
  aliases <- doc[["aliases"]]
  if (is.null(aliases)) return(invisible())
  if (!is_obj(aliases)) check_fault("document", "aliases must map names to state names")
  for (i in seq_along(aliases)) {
    alias <- names(aliases)[[i]]
    target <- aliases[[i]]
    check_path_name(alias, "alias")
    if (!is_str(target) || !target %in% names(doc[["state"]]) ||
        alias %in% names(doc[["state"]])) {
      check_fault("document", sprintf(
        "alias '%s' must name a state entry and not be one", substr(alias, 1, 40)))
    }
  }
}

# A dotted name (a state entry's, a generator's): none of its parts (`clash`) an attribute
# every loaded module has, and none of its parents one of `holders` (which hold no names
# inside them; `holder` says why, with the parent's name).
check_dotted_name <- function(name, what, clash, holders, holder) {
  if (length(clash)) {
    check_fault("names", sprintf(paste(
      "%s '%s' has the part '%s', which every loaded module already has as an",
      "attribute"), what, substr(name, 1, 40), substr(clash[[1]], 1, 40)))
  }
  parts <- strsplit(name, ".", fixed = TRUE)[[1]]
  if (length(parts) > 1L) {
    parents <- vapply(seq_len(length(parts) - 1L),
                      function(i) paste(parts[seq_len(i)], collapse = "."), "")
    inside <- parents[parents %in% holders]
    if (length(inside)) {
      check_fault("names", sprintf(paste0(holder, ", so '%s' cannot be inside it"),
                                   substr(inside[[1]], 1, 40), substr(name, 1, 40)))
    }
  }
}

# generators (name -> {device}): the generators random ops draw from, each named as a
# state entry is (where a loaded module holds it), none a state tensor, a module of one,
# a method, or inside another; see _check_generators() in Python.
check_generators <- function(doc) {
  generators <- doc[["generators"]]
  if (is.null(generators)) return(invisible())
  if (!is_obj(generators)) check_fault("document", "generators must be an object")
  limit <- tb_tables()[["ops"]][["limits"]][["generators"]]
  if (length(generators) > limit) {
    check_fault("resource limits", sprintf("%d generators, more than %d", length(generators),
                                           limit))
  }
  reserved <- unlist(tb_tables()[["ops"]][["names"]][["reserved_attributes"]])
  states <- names(doc[["state"]])
  modules <- unique(unlist(lapply(strsplit(states, ".", fixed = TRUE), function(parts) {
    if (length(parts) < 2L) return(character(0))
    vapply(seq_len(length(parts) - 1L), function(i) paste(parts[seq_len(i)], collapse = "."), "")
  })))
  holders <- c(states, names(generators))
  taken <- c(states, modules, names(doc[["methods"]]))
  for (name in names(generators)) {
    check_path_name(name, "generator")
    parts <- strsplit(name, ".", fixed = TRUE)[[1]]
    clash <- parts[parts %in% reserved | startsWith(parts, "_tb") | parts == "_class_name"]
    check_dotted_name(name, "generator", clash, holders, "'%s' is not a module")
    if (name %in% taken) {
      check_fault("names", sprintf(paste(
        "generator '%s' has the name of a state tensor, a module or a method of the",
        "program"), substr(name, 1, 40)))
    }
    device <- generators[[name]][["device"]]
    if (!is_str(device) || !grepl("^(cpu|cuda)(:[0-9]{1,3})?$", device)) {
      check_fault("document", sprintf("generator '%s' has no device 'cpu' or 'cuda[:N]'",
                                       substr(name, 1, 40)))
    }
  }
}

# specialised (method -> its size-1 variants), a field of the program (format 2): it is
# checked like a field: methods of the file, each variant used once.
check_specialised <- function(doc) {
  spec <- doc[["specialised"]]
  if (is.null(spec)) return(invisible())
  if (!is_obj(spec)) {
    check_fault("document", "specialised must map methods to lists of methods")
  }
  methods <- names(doc[["methods"]])
  seen <- character(0)
  for (i in seq_along(spec)) {
    method <- names(spec)[[i]]
    variants <- spec[[i]]
    if (!method %in% methods || !is_arr(variants)) {
      check_fault("document", sprintf(
        "specialised names '%s', which is not a method with a list of variants",
        substr(method, 1, 40)))
    }
    for (v in variants) {
      if (!is_str(v) || !v %in% methods || v %in% seen || v %in% names(spec)) {
        check_fault("document", sprintf(
          "specialised of '%s' names a variant that is not a method of the file (or twice)",
          method))
      }
      seen <- c(seen, v)
    }
  }
}

check_names_and_dispatch <- function(doc) {
  ops <- tb_tables()[["ops"]]
  methods <- names(doc[["methods"]])
  for (m in methods) check_method_name(m, "method")
  top <- unique(sub("\\..*$", "", names(doc[["state"]])))
  for (m in methods) {
    if (m %in% top) {
      check_fault("names", sprintf(paste(
        "method '%s' has the name of a sub-module or parameter of the program, which it",
        "would hide"), m))
    }
  }
  if (identical(doc[["kind"]], "function")) {
    if (!"forward" %in% methods) {
      check_fault("document", "a function program must have a method 'forward'")
    }
    kinds <- setdiff(vapply(doc[["state"]], function(e) e[["kind"]], character(1)), "constant")
    if (length(kinds)) {
      check_fault("document", paste("a function program holds only constants, not",
                                    paste(sort(unique(kinds)), collapse = ", ")))
    }
  }
  for (key in names(doc[["dispatch"]])) {
    check_method_name(key, "dispatch entry")
    if (key %in% methods) {
      check_fault("dispatch", sprintf("'%s' is both a method and a dispatch entry", key))
    }
    for (mode in c("train", "eval")) {
      target <- doc[["dispatch"]][[key]][[mode]]
      if (!target %in% methods) {
        check_fault("dispatch", sprintf(
          "dispatch of '%s' in %s mode names method '%s', which the file does not have",
          key, mode, target))
      }
    }
  }
  reserved <- unlist(tb_tables()[["ops"]][["names"]][["reserved_attributes"]])
  states <- names(doc[["state"]])
  for (s in states) {
    check_path_name(s, "state")
    parts <- strsplit(s, ".", fixed = TRUE)[[1]]
    check_dotted_name(s, "state name", parts[parts %in% reserved], states,
                      "state '%s' is a tensor")
  }
  mc <- doc[["module_classes"]]
  for (i in seq_along(mc)) {  # by position: the root's path is "", which [[ ]] cannot name
    path <- names(mc)[[i]]
    if (nzchar(path)) check_path_name(path, "module path")
    if (!fits(ops[["names"]][["class"]], mc[[i]], ops[["limits"]][["name_chars"]])) {
      check_fault("names", sprintf("module class '%s' is not a class name",
                                   substr(mc[[i]], 1, 40)))
    }
  }
  # module_reprs: a module's settings, printed only; one line of text (no control characters).
  mr <- doc[["module_reprs"]]
  limit <- ops[["limits"]][["text_chars"]]
  for (i in seq_along(mr)) {
    path <- names(mr)[[i]]
    if (nzchar(path)) check_path_name(path, "module path")
    text <- mr[[i]]
    if (nchar(text, type = "chars") > limit || grepl("[\\x01-\\x1f\\x7f]", text, perl = TRUE)) {
      check_fault("names", sprintf(
        "the settings of module '%s' are not one line of text of at most %d characters",
        substr(path, 1, 40), limit))
    }
  }
  # module_types: a sub-module's class when it is one of torch.nn's own (isinstance of a
  # loaded module in Python); a name under torch.nn, never imported.
  mt <- doc[["module_types"]]
  for (i in seq_along(mt)) {
    path <- names(mt)[[i]]
    if (nzchar(path)) check_path_name(path, "module path")
    name <- mt[[i]]
    if (!is.character(name) || length(name) != 1L ||
        !grepl("^torch\\.nn\\.[A-Za-z0-9_.]+$", name) ||
        nchar(name) > ops[["limits"]][["name_chars"]]) {
      check_fault("names", sprintf("module type '%s' is not a class of torch.nn",
                                   substr(paste(name, collapse = ""), 1, 40)))
    }
  }
  # module_modes: graph -> module path ("" the module itself) -> its training flag as
  # that graph was recorded.
  mm <- doc[["module_modes"]]
  if (!is.null(mm) && length(mm) && !is_obj(mm)) {
    check_fault("document", "module_modes must be an object of graphs")
  }
  for (i in seq_along(mm)) {
    graph <- names(mm)[[i]]
    if (!graph %in% names(doc[["methods"]])) {
      check_fault("names", sprintf("module_modes names graph '%s', which the file does not have",
                                   substr(graph, 1, 40)))
    }
    flags <- mm[[i]]
    if (length(flags) && !is_obj(flags)) {
      check_fault("document", sprintf("module_modes of '%s' must be an object of module paths",
                                      substr(graph, 1, 40)))
    }
    for (j in seq_along(flags)) {
      path <- names(flags)[[j]]
      if (nzchar(path)) check_path_name(path, "module path")
      if (!is_flag(flags[[j]])) {
        check_fault("document", sprintf("module_modes of '%s', '%s': not true or false",
                                        substr(graph, 1, 40), substr(path, 1, 40)))
      }
    }
  }
}
