# The checks that R applies to a parsed program.json before anything uses it: the same
# rules as Python's tracebridge.check.program.check_program, in the same order, driven by
# the same tables (shared_ir/ops.json and shared_ir/dtypes.json, installed with the package
# under inst/shared_ir). jit_inspect() and jit_load() run them; the cross-language test
# (tests/python/test_check_program.py) feeds both checkers the same crafted files.
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
      cache <<- list(ops = ops, dtypes = read("dtypes.json"))
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

# Every rule of shared_ir/SPEC.md; see check_program() in Python for the list.
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
    check_methods(doc, file)
    check_subgraphs(doc, file)
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

# Whether an integer literal lies in [-2^63, 2^64 - 1], exactly (as text for big ones).
int_in_range <- function(x) {
  if (!is_big_int(x)) return(TRUE)
  d <- big_digits(x)
  neg <- startsWith(d, "-")
  d <- sub("^-", "", d)
  d <- sub("^0+(?=.)", "", d, perl = TRUE)
  limit <- if (neg) "9223372036854775808" else "18446744073709551615"
  nchar(d) < nchar(limit) || (nchar(d) == nchar(limit) && d <= limit)
}

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

# --- the JSON Schema (shared_ir/program.schema.json), written out ---------------------------

schema_fault <- function(where, what) {
  check_fault("schema", sprintf("program.json does not follow the schema at %s: %s",
                                where, what))
}

schema_int <- function(x) is_int_lit(x) || (is.double(x) && length(x) == 1L && x %% 1 == 0)

check_schema <- function(doc) {
  dtypes <- names(tb_tables()[["dtypes"]])
  for (field in c("format", "format_version", "opset_version", "producer", "kind",
                  "methods", "state")) {
    if (!field %in% names(doc)) schema_fault("(top level)", sprintf("must contain %s", field))
  }
  p <- doc[["producer"]]
  if (!is_obj(p) || !all(c("name", "version", "language") %in% names(p))) {
    schema_fault("producer", "must be an object with name, version and language")
  }
  if (!is_str(p[["name"]]) || !is_str(p[["version"]]) || !(is_str(p[["language"]]) &&
      p[["language"]] %in% c("python", "r")) || ("torch" %in% names(p) && !is_str(p[["torch"]]))) {
    schema_fault("producer", "has a field of the wrong type")
  }
  if (!(is_str(doc[["kind"]]) && doc[["kind"]] %in% c("function", "module"))) {
    schema_fault("kind", "must be one of ['function', 'module']")
  }
  if ("training" %in% names(doc) && !is_flag(doc[["training"]])) {
    schema_fault("training", "must be boolean")
  }
  if (!is_obj(doc[["methods"]]) || !length(doc[["methods"]])) {
    schema_fault("methods", "must be an object with at least one method")
  }
  if ("dispatch" %in% names(doc)) {
    d <- doc[["dispatch"]]
    if (!is_obj(d)) schema_fault("dispatch", "must be object")
    for (key in names(d)) {
      r <- d[[key]]
      if (!is_obj(r) || !setequal(names(r), c("train", "eval")) || length(r) != 2L ||
          !is_str(r[["train"]]) || !is_str(r[["eval"]])) {
        schema_fault(paste0("dispatch/", key), "must be {train: string, eval: string}")
      }
    }
  }
  for (field in c("module_classes", "module_reprs")) {
    if (field %in% names(doc)) {
      mc <- doc[[field]]
      if (!is_obj(mc) || !all(vapply(mc, is_str, logical(1)))) {
        schema_fault(field, "must be an object of strings")
      }
    }
  }
  st <- doc[["state"]]
  if (!is_obj(st)) schema_fault("state", "must be object")
  for (i in seq_along(st)) {
    name <- names(st)[[i]]
    e <- st[[i]]
    ok <- is_obj(e) && all(c("kind", "dtype", "shape") %in% names(e)) &&
      is_str(e[["kind"]]) && e[["kind"]] %in% c("parameter", "buffer", "constant") &&
      is_str(e[["dtype"]]) && e[["dtype"]] %in% dtypes && is_arr(e[["shape"]]) &&
      all(vapply(e[["shape"]], function(x) schema_int(x) && int_value(x) >= 0, logical(1))) &&
      (!"requires_grad" %in% names(e) || is_flag(e[["requires_grad"]]))
    if (!ok) schema_fault(paste0("state/", name), "is not a state entry")
  }
  if ("tensors" %in% names(doc)) {
    t <- doc[["tensors"]]
    if (!is_obj(t) ||
        ("sha256" %in% names(t) && !is_str(t[["sha256"]])) ||
        ("count" %in% names(t) && !schema_int(t[["count"]]))) {
      schema_fault("tensors", "must be {sha256: string, count: integer}")
    }
  }
  if ("mode_bound" %in% names(doc)) {
    mb <- doc[["mode_bound"]]
    ok <- is_obj(mb) && all(vapply(mb, function(e) {
      is_obj(e) && "training" %in% names(e) && is_flag(e[["training"]]) &&
        (!"op" %in% names(e) || is_str(e[["op"]])) &&
        (!"loc" %in% names(e) || is.null(e[["loc"]]) || is_str(e[["loc"]]))
    }, logical(1)))
    if (!ok) schema_fault("mode_bound", "must map methods to {training, op, loc}")
  }
  if ("backend" %in% names(doc)) {
    b <- doc[["backend"]]
    if (!is_obj(b) || !"name" %in% names(b) || !is_str(b[["name"]])) {
      schema_fault("backend", "must be an object with a name")
    }
  }
  if ("meta" %in% names(doc) && !is_obj(doc[["meta"]])) {
    schema_fault("meta", "must be object")
  }
  for (i in seq_along(doc[["methods"]])) {
    schema_graph(doc[["methods"]][[i]], paste0("methods/", names(doc[["methods"]])[[i]]), dtypes)
  }
}

schema_graph <- function(g, where, dtypes) {
  if (!is_obj(g) || !all(c("inputs", "in_spec", "nodes", "outputs", "out_spec") %in% names(g))) {
    schema_fault(where, "a graph needs inputs, in_spec, nodes, outputs and out_spec")
  }
  if ("arg_names" %in% names(g) &&
      (!is_arr(g[["arg_names"]]) || !all(vapply(g[["arg_names"]], is_str, logical(1))))) {
    schema_fault(paste0(where, "/arg_names"), "must be an array of strings")
  }
  if ("sources" %in% names(g) && (!is_obj(g[["sources"]]) ||
                                   !all(vapply(g[["sources"]], is_str, logical(1))))) {
    schema_fault(paste0(where, "/sources"), "must be an object of strings")
  }
  if (!is_arr(g[["inputs"]])) schema_fault(paste0(where, "/inputs"), "must be array")
  for (v in g[["inputs"]]) schema_value(v, where, dtypes)
  schema_spec(g[["in_spec"]], paste0(where, "/in_spec"))
  schema_spec(g[["out_spec"]], paste0(where, "/out_spec"))
  if (!is_arr(g[["outputs"]])) schema_fault(paste0(where, "/outputs"), "must be array")
  if (!is_arr(g[["nodes"]])) schema_fault(paste0(where, "/nodes"), "must be array")
  for (n in g[["nodes"]]) {
    ok <- is_obj(n) && all(c("op", "args", "kwargs", "outputs") %in% names(n)) &&
      is_str(n[["op"]]) && nchar(n[["op"]]) >= 1L && is_arr(n[["args"]]) &&
      is_obj(n[["kwargs"]]) && is_arr(n[["outputs"]]) &&
      (!"loc" %in% names(n) || is.null(n[["loc"]]) || is_str(n[["loc"]]))
    if (!ok) schema_fault(paste0(where, "/nodes"), "a node needs op, args, kwargs, outputs")
    for (v in n[["outputs"]]) schema_value(v, where, dtypes)
    if ("out_spec" %in% names(n) && !is.null(n[["out_spec"]])) {
      schema_spec(n[["out_spec"]], paste0(where, "/nodes"))
    }
  }
}

schema_value <- function(v, where, dtypes) {
  ok <- is_obj(v) && all(c("id", "kind") %in% names(v)) && schema_int(v[["id"]]) &&
    int_value(v[["id"]]) >= 0 && is_str(v[["kind"]]) &&
    v[["kind"]] %in% unlist(tb_tables()[["ops"]][["value_kinds"]]) &&
    (!"dtype" %in% names(v) || (is_str(v[["dtype"]]) && v[["dtype"]] %in% dtypes)) &&
    (!"shape" %in% names(v) || (is_arr(v[["shape"]]) && all(vapply(
      v[["shape"]], function(d) schema_int(d) || is_str(d), logical(1))))) &&
    (!"name" %in% names(v) || is_str(v[["name"]]))
  if (!ok) schema_fault(where, "a value needs an integer id and a kind")
}

schema_spec <- function(s, where) {
  kinds <- c("leaf", "none", "const", "tuple", "list", "dict", "namedtuple")
  ok <- is_obj(s) && is_str(s[["t"]]) && s[["t"]] %in% kinds &&
    (!"c" %in% names(s) || is_arr(s[["c"]])) && (!"keys" %in% names(s) || is_arr(s[["keys"]])) &&
    (!"name" %in% names(s) || is_str(s[["name"]])) &&
    (!"fields" %in% names(s) || (is_arr(s[["fields"]]) && all(vapply(s[["fields"]], is_str,
                                                                 logical(1)))))
  if (!ok) schema_fault(where, "a spec needs a kind t")
  for (child in s[["c"]]) schema_spec(child, where)
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
    clash <- parts[parts %in% reserved]
    if (length(clash)) {
      check_fault("names", sprintf(paste(
        "state name '%s' has the part '%s', which every loaded module already has as an",
        "attribute"), substr(s, 1, 40), substr(clash[[1]], 1, 40)))
    }
    if (length(parts) > 1L) {
      parents <- vapply(seq_len(length(parts) - 1L),
                        function(i) paste(parts[seq_len(i)], collapse = "."), "")
      inside <- parents[parents %in% states]
      if (length(inside)) {
        check_fault("names", sprintf("state '%s' is a tensor, so '%s' cannot be inside it",
                                     substr(inside[[1]], 1, 40), substr(s, 1, 40)))
      }
    }
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
}

check_methods <- function(doc, file) {
  limit <- tb_tables()[["ops"]][["limits"]][["nodes"]]
  total <- 0
  for (i in seq_along(doc[["methods"]])) {
    m <- names(doc[["methods"]])[[i]]
    total <- total + length(doc[["methods"]][[i]][["nodes"]])
    if (total > limit) {
      inspect_abort(check_message(file, m, NULL, NULL, list(
        message = sprintf("more than %d nodes", limit), rule = "resource limits",
        fix = NULL)))
    }
    check_graph(doc, m, doc[["methods"]][[i]], file)
  }
}

# --- graphs named by nodes (a custom autograd function's forward and backward) ----------

# The node's own shape; the graphs it names are checked by check_subgraphs.
check_autograd_node <- function(node, kinds) {
  args <- node[["args"]]
  kw <- node[["kwargs"]]
  items <- if (length(args) == 1L) lit_elements(args[[1]]) else NULL
  is_tensor_ref <- function(x) {
    is_obj(x) && identical(names(x), "ref") && is_int_lit(x[[1]]) &&
      identical(get0(id_key(x[[1]]), envir = kinds, inherits = FALSE), "Tensor")
  }
  if (is.null(items) || !all(vapply(items, is_tensor_ref, logical(1)))) {
    check_fault("graphs", "prim.autograd_function takes one argument: a list of tensor values")
  }
  for (key in c("forward", "backward")) {
    if (!is_str(kw[[key]])) {
      check_fault("graphs", sprintf("prim.autograd_function needs a '%s' graph name", key))
    }
  }
  saved <- kw[["saved"]]
  if (!is_int_lit(saved) || int_value(saved) < 0) {
    check_fault("graphs",
                "prim.autograd_function needs a count of 'saved' values (an integer >= 0)")
  }
  if (!all(vapply(node[["outputs"]], function(v) identical(v[["kind"]], "Tensor"),
                  logical(1)))) {
    check_fault("graphs", "the outputs of prim.autograd_function are tensors")
  }
  marked <- kw[["non_differentiable"]]
  if (!is.null(marked)) {
    n_out <- length(node[["outputs"]])
    ok <- is_arr(marked) && all(vapply(marked, function(k) {
      is_int_lit(k) && int_value(k) >= 0 && int_value(k) < n_out
    }, logical(1))) && !anyDuplicated(vapply(marked, id_key, character(1)))
    if (!ok) {
      check_fault("graphs",
                  "non_differentiable must list distinct positions of the node's outputs")
    }
  }
}

flat_tuple <- function(spec, count) {
  is_obj(spec) && identical(spec[["t"]], "tuple") && is_arr(spec[["c"]]) &&
    length(spec[["c"]]) == count &&
    all(vapply(spec[["c"]], function(c) is_obj(c) && identical(names(c), "t") &&
                 identical(c[["t"]], "leaf"), logical(1)))
}

autograd_arities <- function(methods, node) {
  kw <- node[["kwargs"]]
  keys <- c("forward", "backward")
  for (key in keys) {
    name <- kw[[key]]
    if (!name %in% names(methods)) {
      check_fault("graphs", sprintf("the %s graph '%s' is not a graph of the file", key,
                                    substr(name, 1, 60)))
    }
    if (any(vapply(methods[[name]][["nodes"]], function(n) identical(n[["op"]], "prim.state"),
                   logical(1)))) {
      check_fault("graphs", sprintf("the %s graph '%s' reads state, which it is not given",
                                    key, substr(name, 1, 60)))
    }
  }
  fwd <- methods[[kw[["forward"]]]]
  bwd <- methods[[kw[["backward"]]]]
  n_in <- length(lit_elements(node[["args"]][[1]]))
  n_out <- length(node[["outputs"]])
  saved <- int_value(kw[["saved"]])
  expected <- list(
    list("forward", "inputs", length(fwd[["inputs"]]), n_in),
    list("forward", "outputs", length(fwd[["outputs"]]), n_out + saved),
    list("backward", "inputs", length(bwd[["inputs"]]), saved + n_out),
    list("backward", "outputs", length(bwd[["outputs"]]), n_in))
  for (e in expected) {
    if (e[[3]] != e[[4]]) {
      check_fault("graphs", sprintf(paste(
        "the %s graph '%s' has %d %s, not %d (the node has %d tensors, %d outputs and %d",
        "saved values)"), e[[1]], substr(kw[[e[[1]]]], 1, 60), as.integer(e[[3]]), e[[2]],
        as.integer(e[[4]]), as.integer(n_in), as.integer(n_out), as.integer(saved)))
    }
  }
  if (!flat_tuple(fwd[["out_spec"]], n_out + saved)) {
    check_fault("graphs", sprintf("the forward graph '%s' must return a flat tuple",
                                  substr(kw[["forward"]], 1, 60)))
  }
  if (!flat_tuple(bwd[["out_spec"]], n_in)) {
    check_fault("graphs", sprintf("the backward graph '%s' must return a flat tuple",
                                  substr(kw[["backward"]], 1, 60)))
  }
  c(kw[["forward"]], kw[["backward"]])
}

# The graphs that prim.autograd_function nodes name: present, arities that agree, no state,
# and no graph that reaches itself (each graph was checked on its own before).
check_subgraphs <- function(doc, file) {
  methods <- doc[["methods"]]
  edges <- list()
  for (m in names(methods)) {
    out <- character(0)
    nodes <- methods[[m]][["nodes"]]
    for (i in seq_along(nodes)) {
      node <- nodes[[i]]
      if (!identical(node[["op"]], "prim.autograd_function")) next
      out <- c(out, tryCatch(autograd_arities(methods, node),
                             tracebridge_check_fault = function(fault) {
        inspect_abort(check_message(file, m, i - 1L, node[["op"]], fault))
      }))
    }
    edges[[m]] <- out
  }
  # Depth-first with an explicit stack (a crafted chain of graphs must not exhaust R's):
  # graphs on the current path are marked 1, finished ones 2 with their height, the levels
  # of graphs below and including them, which may not pass the depth limit.
  limit <- tb_tables()[["ops"]][["limits"]][["depth"]]
  state <- new.env(hash = TRUE)
  height <- new.env(hash = TRUE)
  fault_at <- function(m, rule, message) {
    tryCatch(check_fault(rule, message), tracebridge_check_fault = function(fault) {
      inspect_abort(check_message(file, m, NULL, NULL, fault))
    })
  }
  for (root in names(methods)) {
    if (!is.null(state[[root]])) next
    path <- root
    next_child <- 1L
    state[[root]] <- 1L
    while (length(path)) {
      m <- path[[length(path)]]
      k <- next_child[[length(next_child)]]
      children <- edges[[m]]
      if (k > length(children)) {
        state[[m]] <- 2L
        below <- vapply(children, function(c) height[[c]], numeric(1))
        height[[m]] <- 1 + if (length(below)) max(below) else 0
        if (height[[m]] > limit) {
          fault_at(m, "resource limits", sprintf(
            "graphs nest more than %d levels through prim.autograd_function nodes", limit))
        }
        path <- path[-length(path)]
        next_child <- next_child[-length(next_child)]
        next
      }
      next_child[[length(next_child)]] <- k + 1L
      child <- children[[k]]
      if (identical(state[[child]], 1L)) {
        fault_at(m, "graphs", sprintf(
          "graph '%s' reaches itself through prim.autograd_function nodes (from '%s')",
          child, m))
      }
      if (is.null(state[[child]])) {
        state[[child]] <- 1L
        path <- c(path, child)
        next_child <- c(next_child, 1L)
      }
    }
  }
  invisible()
}

# --- one graph ----------------------------------------------------------------------------

check_graph <- function(doc, method, graph, file) {
  # value id (as text) -> kind, for the values defined so far
  kinds <- new.env(hash = TRUE, size = 1024L)
  opset <- int_value(doc[["opset_version"]] %||% tb_tables()[["ops"]][["opset_version"]])
  located <- function(index, op, expr) {
    tryCatch(expr, tracebridge_check_fault = function(fault) {
      inspect_abort(check_message(file, method, index, op, fault))
    })
  }
  located(NULL, NULL, check_inputs(graph, kinds))
  for (i in seq_along(graph[["nodes"]])) {
    node <- graph[["nodes"]][[i]]
    located(i - 1L, node[["op"]], check_node(doc, node, kinds, opset))
  }
  located(NULL, NULL, {
    for (lit in graph[["outputs"]]) check_literal(lit, kinds)
    check_leaf_count(graph[["out_spec"]], length(graph[["outputs"]]), "outputs", "out_spec")
  })
}

check_inputs <- function(graph, kinds) {
  ops <- tb_tables()[["ops"]]
  for (arg in graph[["arg_names"]]) {
    if (!fits(ops[["names"]][["keyword"]], arg, ops[["limits"]][["name_chars"]]) && !identical(arg, "...")) {
      check_fault("names", sprintf("argument name '%s' is not an identifier", substr(arg, 1, 40)))
    }
  }
  src <- graph[["sources"]]
  for (i in seq_along(src)) {
    if (!fits(ops[["names"]][["loc"]], names(src)[[i]], ops[["limits"]][["text_chars"]]) ||
        nchar(src[[i]], type = "chars") > ops[["limits"]][["text_chars"]]) {
      check_fault("names", sprintf(
        "sources maps 'path:line' locations to lines of at most %d characters",
        ops[["limits"]][["text_chars"]]))
    }
  }
  s <- graph[["in_spec"]]
  ok <- identical(s[["t"]], "tuple") && length(s[["c"]]) == 2L && identical(s[["c"]][[1]][["t"]], "tuple") &&
    identical(s[["c"]][[2]][["t"]], "dict")
  if (!ok) check_fault("specs", "in_spec must be a tuple of (args tuple, kwargs dict)")
  check_leaf_count(s, length(graph[["inputs"]]), "inputs", "in_spec")
  for (v in graph[["inputs"]]) define_value(v, kinds, TRUE)
}

define_value <- function(value, kinds, is_input = FALSE) {
  tables <- tb_tables()
  ops <- tables[["ops"]]
  if (!is_int_lit(value[["id"]])) {
    check_fault("values", sprintf("value id %s is not an integer", format(value[["id"]])))
  }
  key <- id_key(value[["id"]])
  if (exists(key, envir = kinds, inherits = FALSE)) {
    check_fault("SSA", sprintf("value %%%s is defined twice", key), "")
  }
  name <- value[["name"]]
  if (!is.null(name) && !fits(ops[["names"]][["path"]], name, ops[["limits"]][["name_chars"]])) {
    check_fault("names", sprintf("value name '%s' is not a dotted path of [A-Za-z0-9_-] parts",
                                 substr(name, 1, 40)))
  }
  if (identical(value[["kind"]], "Tensor")) {
    if (!(is_str(value[["dtype"]]) && value[["dtype"]] %in% names(tables[["dtypes"]])) ||
        !is_arr(value[["shape"]])) {
      check_fault("values", sprintf("tensor value %%%s needs a dtype of the table and a shape",
                                    key))
    }
    for (dim in value[["shape"]]) {
      ok <- if (is_input) {
        fits(ops[["names"]][["symbol"]], dim, .Machine[["integer.max"]])
      } else if (is_int_lit(dim)) {
        int_value(dim) >= 0 && int_in_range(dim)
      } else {
        fits(ops[["names"]][["dim_expr"]], dim, .Machine[["integer.max"]])
      }
      if (!ok) {
        check_fault("values", sprintf(paste(
          "value %%%s has dimension '%s'; inputs have symbols s0, s1, ..., other values",
          "integers or s-expressions"), key, substr(id_key(dim), 1, 40)))
      }
    }
    example <- value[["example"]]
    if (!is.null(example) && !(is_input && is_arr(example) &&
                                length(example) == length(value[["shape"]]) &&
                                all(vapply(example, function(d) {
                                  is_int_lit(d) && int_value(d) >= 0 && int_in_range(d)
                                }, logical(1))))) {
      check_fault("values", sprintf(paste(
        "value %%%s has an example that is not the sizes of an input",
        "(a list of non-negative integers, one per dimension)"), key))
    }
  }
  assign(key, value[["kind"]], envir = kinds)
}

check_node <- function(doc, node, kinds, opset) {
  ops <- tb_tables()[["ops"]]
  op <- node[["op"]]
  info <- ops[["ops"]][[op]]
  if (is.null(info)) {
    head <- sprintf("uses op '%s', which is not in the op set (version %d)",
                    substr(op, 1, 60), ops[["opset_version"]])
    if (opset < ops[["opset_version"]]) {
      check_fault("ops", sprintf(paste(
        "%s: it was removed after op-set version %d (it reaches raw memory, storages or",
        "PyTorch internals, or was never reviewed)"), head, as.integer(opset)),
        "trace the model again with this tracebridge")
    }
    check_fault("ops", head, "the file is corrupt or was made by a newer tracebridge")
  }
  loc <- node[["loc"]]
  if (!is.null(loc) && !fits(ops[["names"]][["loc"]], loc, ops[["limits"]][["text_chars"]])) {
    check_fault("names", "loc must be 'path:line' without control characters")
  }
  for (key in names(node[["kwargs"]])) {
    if (!fits(ops[["names"]][["keyword"]], key, ops[["limits"]][["name_chars"]])) {
      check_fault("names", sprintf("keyword '%s' is not an identifier", substr(key, 1, 40)))
    }
  }
  flags <- unlist(info[["flags"]])
  if (any(c("structural", "scalar") %in% flags) && length(node[["args"]]) != length(info[["args"]])) {
    check_fault("argument kinds", sprintf("%s takes %d arguments, not %d", op,
                                          length(info[["args"]]), length(node[["args"]])))
  }
  for (lit in node[["args"]]) check_literal(lit, kinds)
  for (lit in node[["kwargs"]]) check_literal(lit, kinds)
  check_arguments(op, info, node, kinds)
  if (identical(op, "prim.state")) {
    state <- node[["args"]][[1]]
    if (!state %in% names(doc[["state"]])) {
      check_fault("state", sprintf("state '%s' does not exist", substr(state, 1, 60)))
    }
  }
  if (identical(op, "prim.guard")) {
    kw <- node[["kwargs"]]
    if (length(node[["args"]]) != 1L || !"expect" %in% names(kw) || length(node[["outputs"]])) {
      check_fault("guards", "prim.guard needs one argument, an 'expect' keyword and no outputs")
    }
    kind <- if ("kind" %in% names(kw)) kw[["kind"]] else "value"
    if (!(is_str(kind) && kind %in% unlist(ops[["guard_kinds"]]))) {
      check_fault("guards", sprintf("guard kind '%s' is not one of %s", format(kind)[1],
                                    paste(unlist(ops[["guard_kinds"]]), collapse = ", ")))
    }
    what <- if ("what" %in% names(kw)) kw[["what"]] else ""
    if (!is_str(what) || nchar(what, type = "chars") > ops[["limits"]][["text_chars"]]) {
      check_fault("guards", sprintf("guard 'what' must be a string of at most %d characters",
                                    ops[["limits"]][["text_chars"]]))
    }
  }
  if (identical(op, "prim.autograd_function")) check_autograd_node(node, kinds)
  if ("scalar" %in% flags) {
    check_scalar_range(op, node[["args"]])
    fold_scalar(op, node, kinds)
  }
  check_leaf_count(node[["out_spec"]], length(node[["outputs"]]), "outputs", "out_spec")
  for (v in node[["outputs"]]) define_value(v, kinds)
}

check_literal <- function(lit, kinds) {
  if (is.null(lit) || is_flag(lit) || is_str(lit) || is.double(lit)) return(invisible())
  if (is_int_lit(lit)) {
    if (!int_in_range(lit)) {
      check_fault("resource limits", sprintf("integer %s is outside int64/uint64",
                                             substr(id_key(lit), 1, 30)))
    }
    return(invisible())
  }
  if (is_arr(lit)) {
    for (x in lit) check_literal(x, kinds)
    return(invisible())
  }
  if (!is_obj(lit) || length(lit) != 1L) {
    check_fault("literals", "a literal object must have exactly one key")
  }
  tag <- names(lit)
  body <- lit[[1]]
  if (identical(tag, "ref")) {
    if (!is_int_lit(body) || !exists(id_key(body), envir = kinds, inherits = FALSE)) {
      check_fault("SSA", sprintf("uses %%%s before it is defined (or never)",
                                 substr(paste(format(body), collapse = ""), 1, 20)),
                  "values must be defined by an input or an earlier node")
    }
  } else if (identical(tag, "float")) {
    if (!(is_str(body) && body %in% c("inf", "-inf", "nan"))) {
      check_fault("literals", "float literal is not inf, -inf or nan")
    }
  } else if (tag %in% c("tuple", "slice")) {
    if (!is_arr(body) || (tag == "slice" && length(body) != 3L)) {
      check_fault("literals", sprintf("malformed %s literal", tag))
    }
    for (x in body) check_literal(x, kinds)
  } else if (identical(tag, "dict")) {
    if (!is_arr(body) || !all(vapply(body, function(p) is_arr(p) && length(p) == 2L,
                                     logical(1)))) {
      check_fault("literals", "a dict literal is a list of [key, value] pairs")
    }
    for (p in body) {
      check_literal(p[[1]], kinds)
      check_literal(p[[2]], kinds)
    }
  } else if (identical(tag, "ellipsis")) {
    if (!isTRUE(body)) check_fault("literals", "the ellipsis literal is {\"ellipsis\": true}")
  } else if (identical(tag, "dtype")) {
    if (!(is_str(body) && body %in% names(tb_tables()[["dtypes"]]))) {
      check_fault("literals", "unknown dtype")
    }
  } else if (identical(tag, "device")) {
    if (!fits(tb_tables()[["ops"]][["names"]][["device"]], body, 16L)) check_fault("literals", "unknown device")
  } else if (identical(tag, "memory_format")) {
    if (!(is_str(body) && body %in% unlist(tb_tables()[["ops"]][["memory_formats"]]))) {
      check_fault("literals", "unknown memory format")
    }
  } else if (identical(tag, "layout")) {
    if (!identical(body, "strided")) check_fault("literals", "unknown layout")
  } else if (identical(tag, "complex")) {
    if (!(is_arr(body) && length(body) == 2L && all(vapply(body, function(x) {
      is_int_lit(x) || is.double(x)
    }, logical(1))))) {
      check_fault("literals", "a complex literal is [real, imag]")
    }
  } else {
    check_fault("literals", sprintf("unknown literal tag '%s'", substr(tag, 1, 20)))
  }
  invisible()
}

# --- argument kinds -----------------------------------------------------------------------

ref_kinds <- c(Tensor = "tensor", int = "int", float = "float", bool = "bool",
               dtype = "dtype", device = "device", list = "list")

lit_kind <- function(lit, kinds) {
  if (is.null(lit)) return("none")
  if (is.logical(lit)) return("bool")
  if (is_int_lit(lit)) return("int")
  if (is.double(lit)) return("float")
  if (is.character(lit)) return("str")
  if (is_arr(lit)) return("list")
  tag <- names(lit)
  if (tag == "ref") return(unname(ref_kinds[get(id_key(lit[[1]]), envir = kinds)]))
  if (tag == "float") return("float")
  if (tag == "tuple") return("list")
  tag
}

lit_elements <- function(lit) {
  if (is_arr(lit)) return(lit)
  if (is_obj(lit) && identical(names(lit), "tuple")) return(lit[[1]])
  NULL
}

takes <- list(
  tensor = "tensor", index_tensor = "tensor", int = c("int", "bool", "tensor"),
  dim = c("int", "bool", "tensor"), index = c("int", "bool", "tensor"),
  float = c("int", "float", "bool", "tensor"),
  scalar = c("int", "float", "bool", "complex", "tensor"), bool = c("bool", "tensor"),
  dtype = "dtype", device = c("device", "str", "int"), layout = "layout",
  memory_format = "memory_format", str = "str", none = "none"
)
element_of <- c(ints = "int", dims = "dim", floats = "float", bools = "bool",
                scalars = "scalar", tensors = "tensor")

accepts <- function(kind, lit, kinds) {
  have <- lit_kind(lit, kinds)
  if (kind == "any") return(TRUE)
  if (kind %in% names(takes)) return(have %in% takes[[kind]])
  if (kind %in% names(element_of)) {
    element <- element_of[[kind]]
    if (have == "list" && is_obj(lit) && identical(names(lit), "ref")) return(TRUE)
    items <- lit_elements(lit)
    if (is.null(items) && !is_arr(lit)) {
      return(kind != "tensors" && accepts(element, lit, kinds))
    }
    optional <- kind == "tensors"
    return(all(vapply(items, function(x) {
      (optional && is.null(x)) || accepts(element, x, kinds)
    }, logical(1))))
  }
  if (kind == "index_expr") return(index_ok(lit, kinds))
  if (kind == "data") return(data_ok(lit, kinds))
  FALSE
}

index_ok <- function(lit, kinds) {
  have <- lit_kind(lit, kinds)
  if (have %in% c("int", "bool", "none", "ellipsis", "tensor")) return(TRUE)
  if (have == "slice") {
    return(all(vapply(lit[[1]], function(x) {
      is.null(x) || lit_kind(x, kinds) %in% c("int", "bool", "tensor")
    }, logical(1))))
  }
  items <- lit_elements(lit)
  (!is.null(items) || is_arr(lit)) && all(vapply(items, index_ok, logical(1), kinds = kinds))
}

data_ok <- function(lit, kinds) {
  have <- lit_kind(lit, kinds)
  if (have %in% c("int", "float", "bool", "complex", "tensor")) return(TRUE)
  items <- lit_elements(lit)
  (!is.null(items) || is_arr(lit)) && all(vapply(items, data_ok, logical(1), kinds = kinds))
}

describe_lit <- function(lit, kinds) {
  text <- substr(as.character(jsonlite::toJSON(lit, auto_unbox = TRUE, null = "null")), 1, 40)
  paste(lit_kind(lit, kinds), text)
}

check_arguments <- function(op, info, node, kinds) {
  args <- node[["args"]]
  varargs <- info[["varargs"]]
  n_pos <- length(info[["args"]])
  for (i in seq_along(args)) {
    pos <- i - 1L
    lit <- args[[i]]
    spread <- !is.null(varargs) && pos >= varargs[[1]]
    if (pos < n_pos) {
      allowed <- unlist(info[["args"]][[i]])
      if (spread && lit_kind(lit, kinds) %in% c("int", "bool")) allowed <- varargs[[2]]
    } else if (spread) {
      allowed <- varargs[[2]]
    } else {
      check_fault("argument kinds", sprintf(
        "%s takes at most %d positional arguments, not %d", op, n_pos, length(args)))
    }
    if (!any(vapply(allowed, accepts, logical(1), lit = lit, kinds = kinds))) {
      check_fault("argument kinds", sprintf("argument %d of %s must be %s, not %s", pos, op,
                                            paste(allowed, collapse = " or "),
                                            describe_lit(lit, kinds)))
    }
  }
  for (key in names(node[["kwargs"]])) {
    allowed <- unlist(info[["kwargs"]][[key]])
    if (is.null(allowed)) check_fault("argument kinds", sprintf("%s takes no keyword '%s'", op, key))
    lit <- node[["kwargs"]][[key]]
    if (!any(vapply(allowed, accepts, logical(1), lit = lit, kinds = kinds))) {
      check_fault("argument kinds", sprintf("keyword '%s' of %s must be %s, not %s", key, op,
                                            paste(allowed, collapse = " or "),
                                            describe_lit(lit, kinds)))
    }
  }
  check_sizes(op, info, node, kinds)
}

# ceil((end - start) / step) of arange(end) / arange(start, end, step) when all three are
# numbers written in the file; NULL when one is traced (or not a number).
range_length <- function(node) {
  number <- function(x) {
    if (is_int_lit(x)) return(as.numeric(int_value(x)))
    if (is.numeric(x) && length(x) == 1L) return(as.numeric(x))
    NULL
  }
  numbers <- lapply(node[["args"]], number)
  if (any(vapply(numbers, is.null, logical(1)))) return(NULL)
  start <- 0
  end <- NULL
  step <- 1
  if (length(numbers) == 1L) end <- numbers[[1]]
  if (length(numbers) > 1L) {
    start <- numbers[[1]]
    end <- numbers[[2]]
    if (length(numbers) > 2L) step <- numbers[[3]]
  }
  kwargs <- node[["kwargs"]]
  for (key in c("start", "end", "step")) {
    if (!is.null(kwargs[[key]])) {
      value <- number(kwargs[[key]])
      if (is.null(value)) return(NULL)
      assign(key, value)
    }
  }
  if (is.null(end)) return(NULL)
  length <- if (step != 0) (end - start) / step else NaN
  if (is.nan(length)) return(NULL)
  if (!is.finite(length)) return(tb_tables()[["ops"]][["limits"]][["int_max"]])
  max(ceiling(length), 0)
}

literal_numel <- function(lit) {
  limit <- tb_tables()[["ops"]][["limits"]][["literal_numel"]]
  if (inherits(lit, "tb_const")) return(max(unclass(lit), 1))
  if (is.logical(lit)) return(1)
  if (is_int_lit(lit)) return(max(int_value(lit), 1))
  if (is_obj(lit) && identical(names(lit), "tuple")) lit <- lit[[1]]
  if (is_arr(lit)) {
    total <- 1
    for (x in lit) {
      if (inherits(x, "tb_const") && unclass(x) > 0) {
        total <- total * unclass(x)
        if (total > limit) return(total)
      } else if (is_int_lit(x) && int_value(x) > 0) {
        total <- total * int_value(x)
        if (total > limit) return(total)
      }
    }
    return(total)
  }
  1
}

check_sizes <- function(op, info, node, kinds) {
  ops <- tb_tables()[["ops"]]
  size_args <- unlist(ops[["size_arguments"]])
  node[["args"]] <- lapply(node[["args"]], fold_size, kinds = kinds)
  node[["kwargs"]] <- lapply(node[["kwargs"]], fold_size, kinds = kinds)
  sized <- node[["kwargs"]][names(node[["kwargs"]]) %in% size_args]
  for (i in seq_along(node[["args"]])) {
    if (i <= length(info[["arg_names"]]) && any(unlist(info[["arg_names"]][[i]]) %in% size_args)) {
      sized[[length(sized) + 1L]] <- node[["args"]][[i]]
    }
  }
  if (!is.null(info[["varargs"]])) {
    from <- info[["varargs"]][[1]] + 1L
    if (length(node[["args"]]) - from + 1L > 1L) {
      sized[[length(sized) + 1L]] <- unname(node[["args"]][from:length(node[["args"]])])
    }
  }
  if (op %in% unlist(ops[["size_products"]]) && length(sized) > 1L) {
    sized <- list(structure(prod(vapply(sized, literal_numel, numeric(1))), class = "tb_numel"))
  }
  if (op %in% unlist(ops[["size_ranges"]])) {
    length <- range_length(node)
    if (!is.null(length)) sized <- list(structure(length, class = "tb_numel"))
  }
  limit <- ops[["limits"]][["literal_numel"]]
  graph_limit <- ops[["limits"]][["graph_literal_numel"]]
  for (lit in sized) {
    numel <- if (inherits(lit, "tb_numel")) unclass(lit) else literal_numel(lit)
    if (numel > limit) {
      check_fault("resource limits", sprintf(paste(
        "%s is asked for %s elements, more than the limit of %s for a size written in the",
        "file"), op, format(numel, scientific = FALSE), format(limit, scientific = FALSE)))
    }
    # The graph's running total sits beside its value kinds (ids are numbers, never ".x").
    total <- (kinds[[".literal_total"]] %||% 0) + numel
    assign(".literal_total", total, envir = kinds)
    if (total > graph_limit) {
      check_fault("resource limits", sprintf(paste(
        "the sizes written in this graph ask for %s elements in all, more than the limit",
        "of %s"), format(total, scientific = FALSE), format(graph_limit, scientific = FALSE)))
    }
  }
}

# The integer a scalar op computes from integer literals (or values folded before) is kept
# beside the graph's value kinds (as ".const.<id>"): a size written as
# scalar.mul(2^20, 2^20) is as much a literal as 2^40 (check_sizes).
fold_scalar <- function(op, node, kinds) {
  # Exact below 2^53 in doubles; a result at or past it is one huge value, as in Python.
  exact <- 2^53
  f <- switch(op,
    "scalar.add" = function(a, b) a + b,
    "scalar.sub" = function(a, b) a - b,
    "scalar.mul" = function(a, b) a * b,
    "scalar.floordiv" = function(a, b) if (b == 0) NULL else a %/% b,
    "scalar.pow" = function(a, b) if (b < 0) NULL else a^b,
    "scalar.lshift" = function(a, b) if (b < 0) NULL else if (a == 0) 0 else a * 2^b,
    "scalar.neg" = function(a) -a,
    "scalar.abs" = function(a) abs(a),
    NULL)
  if (is.null(f) || length(node[["outputs"]]) != 1L) return(invisible())
  args <- lapply(node[["args"]], constant_of, kinds = kinds)
  if (any(vapply(args, function(a) is.null(a) || abs(a) >= exact, logical(1)))) {
    return(invisible())
  }
  value <- tryCatch(do.call(f, args), error = function(e) NULL)
  if (is.null(value)) return(invisible())
  if (!is.finite(value) || abs(value) >= exact) value <- 2^64
  assign(paste0(".const.", id_key(node[["outputs"]][[1]][["id"]])), value, envir = kinds)
}

# An integer literal's value, or a folded value's for a reference to one; NULL otherwise.
constant_of <- function(lit, kinds) {
  if (is_int_lit(lit)) return(as.numeric(int_value(lit)))
  if (is_obj(lit) && identical(names(lit), "ref") && is_int_lit(lit[[1]])) {
    key <- paste0(".const.", id_key(lit[[1]]))
    if (exists(key, envir = kinds, inherits = FALSE)) return(get(key, envir = kinds))
  }
  NULL
}

# A size argument with references to folded values replaced by them, one list deep.
fold_size <- function(lit, kinds) {
  one <- function(x) {
    if (is_obj(x) && identical(names(x), "ref")) {
      v <- constant_of(x, kinds)
      if (!is.null(v)) return(structure(v, class = "tb_const"))
    }
    x
  }
  if (is_obj(lit) && identical(names(lit), "tuple") && is_arr(lit[[1]])) {
    return(list(tuple = lapply(lit[[1]], one)))
  }
  if (is_arr(lit)) return(lapply(lit, one))
  one(lit)
}

check_scalar_range <- function(op, args) {
  if (!op %in% c("scalar.pow", "scalar.lshift") || length(args) != 2L) return(invisible())
  base <- args[[1]]
  by <- args[[2]]
  harmless <- if (op == "scalar.pow") 1 else 0
  if (is_int_lit(by) && abs(int_value(by)) > 64 &&
      !(is_int_lit(base) && abs(int_value(base)) <= harmless)) {
    check_fault("resource limits", sprintf(
      "%s by %s leaves the range of traced numbers (int64)", op, id_key(by)))
  }
}

check_leaf_count <- function(spec, count, what, field) {
  leaves <- spec_leaves(spec)
  if (leaves != count) {
    check_fault("specs", sprintf("%d %s but %s has %d leaves", count, what, field, leaves))
  }
}

spec_leaves <- function(spec) {
  if (is.null(spec)) return(0L)
  if (!is_obj(spec)) check_fault("specs", "a spec must be an object")
  t <- spec[["t"]]
  fields <- list(const = "v", tuple = "c", list = "c", dict = c("keys", "c"),
                 namedtuple = c("name", "fields", "c"))[[t]]
  missing <- setdiff(fields, names(spec))
  if (length(missing)) {
    check_fault("specs", sprintf("a %s spec needs the field '%s'", t, missing[[1]]))
  }
  if (identical(t, "leaf")) return(1L)
  if (t %in% c("none", "const")) return(0L)
  children <- spec[["c"]]
  if (identical(t, "dict") && length(spec[["keys"]]) != length(children)) {
    check_fault("specs", "a dict spec needs as many keys as children")
  }
  if (identical(t, "dict") && !all(vapply(spec[["keys"]], function(k) {
    is.character(k) && length(k) == 1L || is.integer(k) && length(k) == 1L || is.logical(k) &&
      length(k) == 1L
  }, logical(1)))) {
    check_fault("specs", "dict spec keys are strings or integers")
  }
  if (identical(t, "namedtuple")) check_namedtuple_names(spec, length(children))
  sum(vapply(children, spec_leaves, integer(1)))
}

# A named tuple's class name is a dotted path of identifiers, its fields distinct
# identifiers that collections.namedtuple takes (no Python keyword, no leading "_").
check_namedtuple_names <- function(spec, children) {
  ops <- tb_tables()[["ops"]]
  limit <- ops[["limits"]][["name_chars"]]
  ident <- "^[A-Za-z_][A-Za-z0-9_]*$"
  name <- spec[["name"]]
  if (!is_str(name) || nchar(name) > limit ||
      !all(grepl(ident, strsplit(name, ".", fixed = TRUE)[[1]]))) {
    check_fault("specs", sprintf("a namedtuple's name '%s' is not a dotted path of names",
                                 substr(paste(name, collapse = ""), 1, 40)))
  }
  fields <- spec[["fields"]]
  ok <- is.list(fields) && all(vapply(fields, function(f) {
    is_str(f) && grepl(ident, f) && !startsWith(f, "_") && nchar(f) <= limit &&
      !f %in% unlist(ops[["names"]][["python_keywords"]])
  }, TRUE))
  if (!ok || anyDuplicated(unlist(fields))) {
    check_fault("specs", sprintf("the fields of namedtuple '%s' are not distinct plain names",
                                 substr(name, 1, 40)))
  }
  if (length(fields) != children) {
    check_fault("specs", "a namedtuple spec needs as many fields as children")
  }
}
