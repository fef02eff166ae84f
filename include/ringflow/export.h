/* ringflow/export.h - symbol visibility: RF_API marks the public surface; every
 * other symbol of the library is built hidden. */
#ifndef RINGFLOW_EXPORT_H
#define RINGFLOW_EXPORT_H

#if defined(RF_BUILDING_LIBRARY)
#define RF_API __attribute__((visibility("default")))
#else
#define RF_API
#endif

#endif
