# The R side of adapters/rtorch.py: calls R torch's kl_div APIs for the harness.
#
# Started as `Rscript rtorch_worker.R BASE STEP PERIOD REDUCED` (the upstream gradient's pattern) by
# adapters/rtorch.py, through adapters/rsession.py. Reads one request per
# line on stdin and writes one reply per line on stdout, each reply starting with "@kl".
# Fields are tab-separated; free text is percent-encoded, numbers are hex floats ("%a"),
# arrays are flat in C (row-major) order with their shape beside them, so R's
# column-major arrays never enter: tensors are built from flat vectors by reshape().
#
# Handshake:  @kl ready <torch version> <libtorch version> <R version> <dtypes> <cuda 0|1> <cuda device name>
#             @kl unavailable <reason>
# Request:    call <function> <function|module> <arguments> <device> <part> <layout> <input dtype>
#                  <target dtype> <input shape> <target shape> <input values> <target values>
#             (the call as adapters/rtorch.py's RCall states it: a function of R torch called on
#             (x, t) with the arguments, or a module built with them and called on (x, t);
#             arguments are name=value pairs, each side percent-encoded, joined by commas)
# Replies:    @kl ok <dtype> <shape> <values> <warnings>
#             @kl none <warnings>                       (autograd gave no gradient)
#             @kl err <condition class> <message> <warnings>

# The upstream gradient's pattern (spec: gradients.upstream), from the adapter: base, step, period, reduced.
UPSTREAM <- as.numeric(commandArgs(trailingOnly = TRUE))

reply <- function(...) {
  cat(paste("@kl", ..., sep = "\t"), "\n", sep = "", file = stdout())
  flush(stdout())
}
enc <- function(text) if (length(text) == 0 || !nzchar(text)) "-" else utils::URLencode(enc2utf8(text), reserved = TRUE)
dec <- function(field) if (field == "-") "" else utils::URLdecode(field)
numbers <- function(field) if (field == "-") numeric(0) else as.numeric(strsplit(field, ",", fixed = TRUE)[[1]])
shape_of <- function(field) if (field == "-") integer(0) else as.integer(strsplit(field, ",", fixed = TRUE)[[1]])
join <- function(x) if (length(x) == 0) "-" else paste(x, collapse = ",")

if (!requireNamespace("torch", quietly = TRUE)) {
  reply("unavailable", enc(paste0(
    "the R package torch is not installed in R's library paths (", paste(.libPaths(), collapse = ", "),
    "); install it with install.packages(\"torch\") and torch::install_torch(), ",
    "or set KL_RTORCH_LIB to a library that holds an R torch build")))
  quit(save = "no", status = 0)
}
if (!torch::torch_is_installed()) {
  reply("unavailable", enc(paste0(
    "R torch ", utils::packageVersion("torch"), " is installed but its libraries (libtorch, liblantern) are not, ",
    "at ", torch::torch_install_path(), "; run torch::install_torch(), or set TORCH_HOME to where they are")))
  quit(save = "no", status = 0)
}
load_warnings <- character(0)
started <- withCallingHandlers(
  tryCatch({
    suppressPackageStartupMessages(library(torch))
    torch_tensor(1)  # fails if lantern or libtorch cannot be loaded
    NULL
  }, error = function(e) conditionMessage(e)),
  warning = function(w) {
    load_warnings <<- c(load_warnings, conditionMessage(w))
    invokeRestart("muffleWarning")
  })
if (!is.null(started)) {
  reply("unavailable", enc(paste0("R torch ", utils::packageVersion("torch"), " failed to start: ",
                                  paste(c(started, load_warnings), collapse = "; "))))
  quit(save = "no", status = 0)
}

# the dtypes this R torch has, by the harness's names (torch_bfloat16() came after 0.11.0)
DTYPES <- Filter(Negate(is.null), lapply(
  c(float16 = "float16", bfloat16 = "bfloat16", float32 = "float32", float64 = "float64", int8 = "int8",
    int16 = "int16", int32 = "int32", int64 = "int64", uint8 = "uint8", bool = "bool"),
  function(name) {
    f <- paste0("torch_", name)
    if (exists(f, envir = asNamespace("torch"))) get(f, envir = asNamespace("torch"))()
  }))
DTYPE_NAMES <- c(Half = "float16", BFloat16 = "bfloat16", Float = "float32", Double = "float64",
                 Long = "int64", Int = "int32", Short = "int16", Char = "int8", Byte = "uint8", Bool = "bool")

dtype_name <- function(tensor) {
  name <- as.character(tensor$dtype)
  if (name %in% names(DTYPE_NAMES)) DTYPE_NAMES[[name]] else tolower(name)
}

# The tensor a case asks for, in its layout, as a view of a contiguous leaf buffer:
# transposed views the buffer (last two axes swapped) swapped back; strided views
# every other element of a buffer twice as long in the last axis.
build <- function(values, shape, dtype, device, layout, requires_grad) {
  v <- torch_tensor(values, dtype = torch_float64())$reshape(shape)
  buffer <- switch(layout,
    contiguous = v,
    transposed = v$transpose(-1, -2)$contiguous(),
    strided = v$repeat_interleave(2L, dim = -1L))
  leaf <- buffer$to(device = device, dtype = DTYPES[[dtype]])
  if (requires_grad) leaf$requires_grad_(TRUE)
  switch(layout, contiguous = leaf, transposed = leaf$transpose(-1, -2), strided = leaf[.., 1:N:2])
}

# The gradient flowing into the loss (spec: gradients.upstream), in C order.
upstream <- function(like) {
  shape <- like$shape
  n <- prod(shape)
  values <- if (length(shape) == 0) UPSTREAM[4] else UPSTREAM[1] + UPSTREAM[2] * ((seq_len(n) - 1) %% UPSTREAM[3])
  torch_tensor(values, dtype = torch_float64())$reshape(shape)$to(device = like$device, dtype = like$dtype)
}

# The named arguments of a request's call (string values).
arguments <- function(field) {
  if (field == "-") return(list())
  pairs <- strsplit(field, ",", fixed = TRUE)[[1]]
  values <- lapply(sub("^[^=]*=", "", pairs), utils::URLdecode)
  stats::setNames(values, vapply(sub("=.*$", "", pairs), utils::URLdecode, ""))
}

# The call a request states, made on (x, t): the one statement of it is adapters/rtorch.py's RCall.
kl <- function(fn, style, args, x, t) {
  f <- get(fn, envir = asNamespace("torch"), mode = "function")
  if (style == "module") do.call(f, args)(x, t) else do.call(f, c(list(x, t), args))
}

# forward: the loss; grad_input / grad_target: autograd_grad of the loss with the upstream
# gradient; grad2_input: d/dtarget of sum(grad_input * upstream), by double backward.
compute <- function(f) {
  device <- f[5]; part <- f[6]; layout <- f[7]
  x <- build(numbers(f[12]), shape_of(f[10]), f[8], device, layout, part %in% c("grad_input", "grad2_input"))
  t <- build(numbers(f[13]), shape_of(f[11]), f[9], device, layout, part %in% c("grad_target", "grad2_input"))
  out <- kl(f[2], f[3], arguments(f[4]), x, t)
  if (part == "forward") return(out)
  wrt <- if (part == "grad_target") t else x
  second <- part == "grad2_input"
  grad <- autograd_grad(out, list(wrt), grad_outputs = list(upstream(out)), allow_unused = TRUE,
                        create_graph = second)[[1]]
  if (!second || is_undefined_tensor(grad)) return(grad)
  autograd_grad((grad * upstream(grad))$sum(), list(t), allow_unused = TRUE)[[1]]
}

serve <- function(line) {
  f <- strsplit(line, "\t", fixed = TRUE)[[1]]
  if (f[1] != "call" || length(f) != 13) return(c("err", "protocol", enc(paste("bad request:", substr(line, 1, 200))), "-"))
  warned <- character(0)
  result <- withCallingHandlers(
    tryCatch(compute(f), error = function(e) e),
    warning = function(w) {
      warned <<- c(warned, enc(conditionMessage(w)))
      invokeRestart("muffleWarning")
    })
  warnings <- join(warned)
  if (inherits(result, "error")) return(c("err", enc(class(result)[1]), enc(conditionMessage(result)), warnings))
  if (!inherits(result, "torch_tensor")) return(c("err", "NotATensor", enc(paste("returned", class(result)[1])), warnings))
  if (is_undefined_tensor(result)) return(c("none", warnings))
  flat <- as.numeric(as_array(result$detach()$to(device = "cpu", dtype = torch_float64())$reshape(-1)))
  c("ok", dtype_name(result), join(result$shape), join(sprintf("%a", flat)), warnings)
}

cuda <- cuda_is_available()
reply("ready", as.character(utils::packageVersion("torch")), torch:::torch_version,
      paste(R.version$major, R.version$minor, sep = "."), join(names(DTYPES)), as.integer(cuda),
      enc(if (cuda) paste0("CUDA device ", cuda_current_device(), " (compute capability ",
                         paste(cuda_get_device_capability(), collapse = "."), ")") else ""))
input <- file("stdin", open = "r")
repeat {
  line <- readLines(input, n = 1)
  if (length(line) == 0) break  # end of input: the adapter closed the session
  fields <- tryCatch(serve(line), error = function(e) c("err", "protocol", enc(conditionMessage(e)), "-"))
  do.call(reply, as.list(fields))
}
