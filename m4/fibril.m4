dnl m4/fibril.m4 - fibril's own autoconf macros: required pkg-config
dnl libraries with a clear message, and the module selection switches.

dnl FIBRIL_REQUIRE_PKG(VAR, MODULES, DEBIAN-PACKAGES)
AC_DEFUN([FIBRIL_REQUIRE_PKG], [
  PKG_CHECK_MODULES([$1], [$2], [],
    [AC_MSG_ERROR([missing library: $2 (pkg-config could not find it; on Debian: apt-get install $3)])])
])

dnl FIBRIL_MODULES_BEGIN([all module names, space separated])
AC_DEFUN([FIBRIL_MODULES_BEGIN], [
  fibril_all_modules="$1"
  AC_ARG_ENABLE([modules],
    [AS_HELP_STRING([--enable-modules=LIST], [comma-separated modules to build (default: all: $1)])],
    [], [enable_modules=all])
  AS_IF([test "x$enable_modules" = xall || test "x$enable_modules" = xyes],
    [fibril_selected=" $1 "],
    [fibril_selected=" `echo "$enable_modules" | tr ',' ' '` "])
  for m in $fibril_selected; do
    case " $1 " in
      *" $m "*) ;;
      *) AC_MSG_ERROR([--enable-modules: unknown module '$m' (known: $1)]) ;;
    esac
  done
  FIBRIL_BUILD_MODULES=""
])

dnl FIBRIL_MODULE([name]) - one switch --disable-module-NAME per module.
AC_DEFUN([FIBRIL_MODULE], [
  AC_ARG_ENABLE([module-$1],
    [AS_HELP_STRING([--disable-module-$1], [do not build the $1 module])],
    [], [enable_module_]m4_translit([$1], [-], [_])[=default])
  fibril_want=no
  case "$fibril_selected" in *" $1 "*) fibril_want=yes ;; esac
  AS_CASE(["$enable_module_]m4_translit([$1], [-], [_])["],
    [no], [fibril_want=no], [yes], [fibril_want=yes])
  AS_IF([test "x$fibril_want" = xyes], [FIBRIL_BUILD_MODULES="$FIBRIL_BUILD_MODULES $1"])
  AM_CONDITIONAL([MODULE_]m4_toupper(m4_translit([$1], [-], [_])), [test "x$fibril_want" = xyes])
])

AC_DEFUN([FIBRIL_MODULES_END], [
  AC_SUBST([FIBRIL_BUILD_MODULES])
])
